"""Checksums and structural checks that turn a regex candidate into a finding.

Every function takes the matched text and returns ``True`` when it is a plausible value of its kind.
They are pure and cheap; a regex alone over-matches order numbers, hashes and timestamps, a
checksum does not.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import math
import re
from collections import Counter

__all__ = [
    "base58check_ok",
    "bech32_ok",
    "ca_sin_ok",
    "digits_of",
    "es_dni_ok",
    "eth_address_ok",
    "iban_ok",
    "in_aadhaar_ok",
    "ipv4_ok",
    "ipv6_ok",
    "it_fiscal_code_ok",
    "jwt_ok",
    "luhn_ok",
    "nl_bsn_ok",
    "shannon_entropy",
    "uk_nhs_ok",
    "uk_nino_ok",
    "us_ssn_ok",
]

_NON_DIGIT = re.compile(r"\D")


def digits_of(text: str) -> str:
    return _NON_DIGIT.sub("", text)


def luhn_ok(text: str) -> bool:
    digits = digits_of(text)
    if not 12 <= len(digits) <= 19 or len(set(digits)) == 1:
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# ISO 13616 lengths by country (registry of SWIFT); a wrong length is never an IBAN.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}


def iban_ok(text: str) -> bool:
    iban = re.sub(r"[\s-]", "", text).upper()
    expected = _IBAN_LENGTHS.get(iban[:2])
    if expected is None or len(iban) != expected or not iban.isalnum():
        return False
    rearranged = iban[4:] + iban[:4]
    try:
        number = int("".join(str(int(ch, 36)) for ch in rearranged))
    except ValueError:
        return False
    return number % 97 == 1


def ipv4_ok(text: str) -> bool:
    parts = text.split(".")
    if len(parts) != 4:
        return False
    for part in parts:
        if not part.isdigit() or int(part) > 255 or (len(part) > 1 and part[0] == "0"):
            return False
    # 0.0.0.0, 255.255.255.255 and loopback (127/8) are wildcards, broadcast and "this host": they
    # point at no one.
    # Netmasks (255.x) are no host either, nor is a /8 network written out ("1.0.0.0", more often a
    # version string in a tuple).
    return text != "0.0.0.0" and not text.startswith(("127.", "255.")) and not text.endswith(".0.0.0")


def ipv6_ok(text: str) -> bool:
    if text.count(":") < 2:
        return False
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return not (address.is_unspecified or address.is_loopback)


def us_ssn_ok(text: str) -> bool:
    digits = digits_of(text)
    if len(digits) != 9:
        return False
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return False
    # Structural rules only: the well-known sample numbers (123-45-6789 ...) are what test data and
    # careless users write, and a gateway should still keep them from leaving.
    return len(set(digits)) > 1


_NINO_BAD_PREFIX = {"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"}


def uk_nino_ok(text: str) -> bool:
    nino = re.sub(r"\s", "", text).upper()
    if not re.fullmatch(r"[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]\d{6}[A-D]", nino):
        return False
    return nino[:2] not in _NINO_BAD_PREFIX


def uk_nhs_ok(text: str) -> bool:
    digits = digits_of(text)
    if len(digits) != 10 or len(set(digits)) == 1:
        return False
    total = sum(int(d) * (10 - i) for i, d in enumerate(digits[:9]))
    check = 11 - total % 11
    if check == 11:
        check = 0
    return check != 10 and check == int(digits[9])


def ca_sin_ok(text: str) -> bool:
    digits = digits_of(text)
    if len(digits) != 9 or digits[0] in "08":
        return False
    total = 0
    for i, ch in enumerate(digits):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def es_dni_ok(text: str) -> bool:
    value = re.sub(r"[\s-]", "", text).upper()
    if re.fullmatch(r"[XYZ]\d{7}[A-Z]", value):
        value = str("XYZ".index(value[0])) + value[1:]
    if not re.fullmatch(r"\d{8}[A-Z]", value):
        return False
    return _DNI_LETTERS[int(value[:8]) % 23] == value[8]


_VERHOEFF_D = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 0, 6, 7, 8, 9, 5], [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
    [3, 4, 0, 1, 2, 8, 9, 5, 6, 7], [4, 0, 1, 2, 3, 9, 5, 6, 7, 8], [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
    [6, 5, 9, 8, 7, 1, 0, 4, 3, 2], [7, 6, 5, 9, 8, 2, 1, 0, 4, 3], [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
]
_VERHOEFF_P = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 5, 7, 6, 2, 8, 3, 0, 9, 4], [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
    [8, 9, 1, 6, 0, 4, 3, 5, 2, 7], [9, 4, 5, 3, 1, 2, 6, 8, 7, 0], [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
    [2, 7, 9, 3, 8, 0, 6, 4, 1, 5], [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
]


def in_aadhaar_ok(text: str) -> bool:
    digits = digits_of(text)
    if len(digits) != 12 or digits[0] in "01" or len(set(digits)) == 1:
        return False
    check = 0
    for i, ch in enumerate(reversed(digits)):
        check = _VERHOEFF_D[check][_VERHOEFF_P[i % 8][int(ch)]]
    return check == 0


def nl_bsn_ok(text: str) -> bool:
    digits = digits_of(text)
    if len(digits) != 9 or len(set(digits)) == 1:
        return False
    total = sum(int(d) * w for d, w in zip(digits, (9, 8, 7, 6, 5, 4, 3, 2, -1), strict=True))
    return total % 11 == 0 and total != 0


_CF_ODD = {
    **dict(zip("0123456789", (1, 0, 5, 7, 9, 13, 15, 17, 19, 21), strict=True)),
    **dict(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ",
               (1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4, 18, 20, 11, 3, 6, 8, 12, 14, 16, 10, 22, 25, 24, 23),
               strict=True)),
}


def it_fiscal_code_ok(text: str) -> bool:
    code = text.upper()
    if not re.fullmatch(r"[A-Z]{6}[0-9LMNPQRSTUV]{2}[A-EHLMPRST][0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{3}[A-Z]",
                        code):
        return False
    total = 0
    for i, ch in enumerate(code[:15]):
        if i % 2 == 0:
            total += _CF_ODD[ch]
        else:
            total += int(ch) if ch.isdigit() else ord(ch) - 65
    return chr(65 + total % 26) == code[15]


_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def base58check_ok(text: str) -> bool:
    number = 0
    for ch in text:
        index = _B58.find(ch)
        if index < 0:
            return False
        number = number * 58 + index
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    raw = b"\x00" * (len(text) - len(text.lstrip("1"))) + raw
    if len(raw) != 25:
        return False
    return hashlib.sha256(hashlib.sha256(raw[:-4]).digest()).digest()[:4] == raw[-4:]


_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def _bech32_polymod(values: list[int]) -> int:
    generator = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
    checksum = 1
    for value in values:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value
        for i in range(5):
            checksum ^= generator[i] if (top >> i) & 1 else 0
    return checksum


def bech32_ok(text: str) -> bool:
    address = text.lower()
    if text != address and text != text.upper():
        return False
    hrp, sep, data = address.rpartition("1")
    if not sep or hrp not in ("bc", "tb", "ltc") or len(data) < 7:
        return False
    if any(ch not in _BECH32 for ch in data):
        return False
    values = [ord(ch) >> 5 for ch in hrp] + [0] + [ord(ch) & 31 for ch in hrp] + [_BECH32.index(ch) for ch in data]
    return _bech32_polymod(values) in (1, 0x2BC830A3)  # bech32 and bech32m constants


def eth_address_ok(text: str) -> bool:
    body = text[2:]
    if len(body) != 40 or text[:2].lower() != "0x":
        return False
    try:
        int(body, 16)
    except ValueError:
        return False
    # EIP-55 mixed-case checksum needs keccak, which hashlib lacks; accept all-lower/upper and
    # mixed case alike, but not a run of one digit (test fixtures, zero address).
    return len(set(body.lower())) > 4


def jwt_ok(text: str) -> bool:
    parts = text.split(".")
    if len(parts) != 3:
        return False
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return False
    return isinstance(header, dict) and ("alg" in header or "typ" in header)


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``'s own symbol distribution."""
    if not text:
        return 0.0
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())
