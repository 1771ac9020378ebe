"""Which phone-number candidates are someone's number: validity, reserved ranges, business lines.

A regex over digits and separators matches order numbers, dates and made-up numbers as readily as
phones, so every phone rule ends here. ``phonenumbers`` says whether a number is possible or valid
for its country; on top of that the North American plan has structural rules the library only
partly enforces (area code and exchange never start with 0 or 1; 555-0100..0199 is reserved for
fiction), and toll-free / premium-rate lines are businesses' numbers, not personal data.
"""

from __future__ import annotations

import re

import phonenumbers
from phonenumbers import PhoneNumberType

__all__ = ["eu_national_ok", "international_ok", "nanp_ok", "not_reserved_nanp", "possible_nanp", "possible_with_00"]

_NON_DIGIT = re.compile(r"\D")
_BUSINESS_TYPES = frozenset({PhoneNumberType.TOLL_FREE, PhoneNumberType.PREMIUM_RATE,
                             PhoneNumberType.SHARED_COST})
# UK mobiles (07xxx xxxxxx) include Ofcom's drama range 07700 900xxx, which the library calls
# invalid; written out it is still what a person gives as their mobile number.
_UK_MOBILE = re.compile(r"07\d{3}\s?\d{6}")


def _digits(text: str) -> str:
    return _NON_DIGIT.sub("", text)


def nanp_ok(national: str) -> bool:
    """A ten-digit North American number that can be dialled and names a subscriber.

    Refused: area code or exchange starting with 0/1, N11 service codes, the 555-01xx fiction
    range, toll-free area codes (8YY: 800, 833 ... 888), 900 premium rate.
    """
    if len(national) == 11 and national[0] == "1":
        national = national[1:]
    if len(national) != 10 or not national.isdigit():
        return False
    area, exchange, line = national[:3], national[3:6], national[6:]
    if area[0] in "01" or exchange[0] in "01":
        return False
    if area[1:] == "11" or exchange[1:] == "11":
        return False
    if exchange == "555" and line.startswith("01"):
        return False
    if (area[0] == "8" and area[1] == area[2]) or area == "900":  # 800, 822 ... 888 (8YY toll free), 900
        return False
    return len(set(national)) > 2


def not_reserved_nanp(value: str) -> bool:
    """For numbers people write loosely next to a phone word (123-456-7890, 555-0123 as "my number"):
    anything but a toll-free / premium line. The user says it is their number; a fictional one
    costs nothing to pseudonymise."""
    national = _digits(value)
    if len(national) == 11 and national[0] == "1":
        national = national[1:]
    if len(national) != 10:
        return False
    area = national[:3]
    if (area[0] == "8" and area[1] == area[2]) or area == "900":
        return False
    return len(set(national)) > 2


def _business(number: phonenumbers.PhoneNumber) -> bool:
    return phonenumbers.is_valid_number(number) and phonenumbers.number_type(number) in _BUSINESS_TYPES


def international_ok(value: str) -> bool:
    """``+CC ...``: possible for its country, not a business line; NANP numbers checked structurally."""
    digits = _digits(value)
    if not 8 <= len(digits) <= 15:
        return False
    try:
        number = phonenumbers.parse(value, None)
    except phonenumbers.NumberParseException:
        return False
    if not phonenumbers.is_possible_number(number):
        return False
    if number.country_code == 1:
        return nanp_ok(str(number.national_number))
    return not _business(number)


def possible_with_00(value: str) -> bool:
    """``00CC ...`` (the international prefix of most of Europe): a valid number once read as ``+CC``."""
    compact = value.strip()
    if not compact.startswith("00"):
        return False
    try:
        number = phonenumbers.parse("+" + compact[2:], None)
    except phonenumbers.NumberParseException:
        return False
    if number.country_code == 1:
        return nanp_ok(str(number.national_number))
    return phonenumbers.is_valid_number(number) and not _business(number)


def possible_nanp(value: str) -> bool:
    """A number written the North American way: possible for the US and structurally dialable."""
    try:
        number = phonenumbers.parse(value, "US")
    except phonenumbers.NumberParseException:
        return False
    return bool(phonenumbers.is_possible_number(number)) and nanp_ok(_digits(value))


def eu_national_ok(value: str) -> bool:
    """A number in a national format (trunk 0) written the way its country writes it, and valid there.

    Numbering plans are permissive (almost any ``0xxx xxxxxx`` is valid in some country), so the
    written shape picks the country: French pairs (06 12 34 56 78), British groupings (020 7946 0958,
    07700 900123), German (030/1234567, (089) 12345678, 0171 1234567), Dutch (020-1234567).
    """
    compact = value.strip()
    digits = _digits(compact)
    if not 9 <= len(digits) <= 12 or len(set(digits)) <= 2:
        return False
    if _UK_MOBILE.fullmatch(compact):
        return True
    return any(shape.fullmatch(compact) and any(_valid_in(compact, region) for region in regions)
               for shape, regions in _NATIONAL_SHAPES)


def _valid_in(value: str, region: str) -> bool:
    try:
        number = phonenumbers.parse(value, region)
    except phonenumbers.NumberParseException:
        return False
    return phonenumbers.is_valid_number(number) and not _business(number)


_NATIONAL_SHAPES: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"0[1-9]([ .-])\d{2}(?:\1\d{2}){3}"), ("FR",)),
    (re.compile(r"0\d{4} \d{6}|0\d{4} \d{3} \d{3}|0\d{3} \d{3} \d{4}|0\d{2} \d{4} \d{4}"), ("GB",)),
    # German: a slash after the area code, the area code in parentheses, or a mobile prefix (015x-017x);
    # a bare "0xxx xxxxxx" is as often an order or customer number, so that needs a phone word (context rule)
    (re.compile(r"0\d{2,4}/\d{3,8}(?:-\d{1,5})?|\(0\d{2,4}\) ?\d{3,8}(?:-\d{1,5})?|01[5-7]\d{1,2}[ -]\d{6,8}"),
     ("DE",)),
    (re.compile(r"0\d{1,3}-\d{6,8}"), ("NL",)),  # Dutch: 020-1234567, 06-12345678
)
