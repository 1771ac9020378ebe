"""Pattern rules for personal data: contact details, payment data, network identifiers, national IDs.

Every rule pairs a regex with a checksum or structural validator wherever the format has one (Luhn,
ISO 7064 mod 97, Verhoeff, mod 11, base58check, bech32), because a bare regex over digits fires on
order numbers, timestamps and hashes. Formats without a checksum that also look like ordinary
numbers (a nine-digit BSN or SIN) require a context word just before them.
"""

from __future__ import annotations

import ipaddress
import re

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.recognizers import phone_checks as phones
from kvfence.gateway.protection.detect.recognizers import validators as v
from kvfence.gateway.protection.detect.recognizers.address import ADDRESS_RULES
from kvfence.gateway.protection.detect.recognizers.address_intl import INTL_ADDRESS_RULES
from kvfence.gateway.protection.detect.recognizers.dob import DOB_RULES
from kvfence.gateway.protection.detect.recognizers.id_checks import de_tax_id_ok, fr_nir_ok
from kvfence.gateway.protection.detect.recognizers.obfuscated_email import OBFUSCATED_EMAIL_RULES
from kvfence.gateway.protection.detect.scanner import Anchor, Rule

__all__ = ["PII_ENTITIES", "PII_RULES", "PRIVATE_IP_RULES", "RESTRICTED_PII", "ip_is_public"]

# Rules for addresses in private, loopback, link-local, shared (CGNAT) and documentation ranges:
# they name a machine on someone's internal network, not a person, so they are off unless the
# policy says otherwise (``gateway.protection.private_ips: true``).
PRIVATE_IP_RULES = ("ipv4_private", "ipv6_private")


def ip_is_public(value: str) -> bool:
    """True for a globally routable address (what can point at a subscriber)."""
    try:
        return ipaddress.ip_address(value).is_global
    except ValueError:
        return False


_PII = Category.PII

# Matched at the start of a word (see Rule): "tel" is in "Tel.:" and "telefon", not in "Bestellung".
_PHONE_CONTEXT = ("phone", "tel", "call", "mobile", "cell", "ring", "whatsapp", "sms", "text me", "fax",
                  "contact", "reach", "my number", "number is", "dial", "handy", "telefon", "portable",
                  "landline", "ruf", "anruf", "erreichbar", "mobil", "numéro", "téléphone", "appel", "joindre",
                  "teléfono", "móvil", "llama", "cellulare", "chiama", "bellen", "bel me", "hotline")
# Dotted numbers after these words are versions or section numbers, not IPv4 addresses.
# Whole words only: "server 10.1.2.3" is a host, not "ver 10.1.2.3".
_VERSION_BEFORE = re.compile(r"(?:\b(?:v|version|ver\.?|release|build|firmware|rev\.?|oid|section|chapter|step|clause"
                             r"|item)|§|/|==|~=|>=|<=)\s*[:=]?\s*$")

_IP_CONTEXT = ("ip", "address", "addr", "host", "from", "client", "server", "peer", "src", "dst", "source",
               "destination", "connect", "login", "remote", "nameserver", "dns", "gateway", "route", "ping", "@",
               "ssh", "curl", "http", "proxy", "bind", "listen", "inet", "origin", "forwarded")


def _small_octets(value: str) -> bool:
    return all(int(octet) < 32 for octet in value.split("."))


# Every digit-shaped identifier (phones, cards, SSNs, IPs ...) lies in or next to a run of digits
# and separators; that run is found once per text and the rules only run around it.
_DIGITS = Anchor(re.compile(r"\d[\d ().-]{5,}\d"), before=5, after=3)
_AT = Anchor(re.compile(r"@"), before=64, after=256)
_COUNTRY_CODE = Anchor(re.compile(r"[A-Z]{2} ?\d{2}"), before=1, after=48)
_HEX_COLON = Anchor(re.compile(r"[0-9A-Fa-f]{0,4}::?[0-9A-Fa-f]{1,4}:"), before=40, after=48)

# Message-IDs look like addresses (<id@host>) but name a message, not a person.
_MESSAGE_ID_BEFORE = re.compile(r"(?:message-id|in-reply-to|references|content-id)\s*:\s*<?$")

# Visa, Mastercard, Amex, Diners, JCB, Discover, UnionPay, UATP-like 8x, Maestro (its own IINs only:
# a whole 5x/6x range would take many Luhn-valid order numbers for cards)
_CARD_PREFIX = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[068]|35|6011|64[4-9]|65|62|8[0-9]"
                          r"|5018|5020|5038|5893|6304|6759|676[1-3])")


def _card_ok(value: str) -> bool:
    digits = v.digits_of(value)
    if not _CARD_PREFIX.match(digits) or not v.luhn_ok(digits):
        return False
    groups = re.split(r"[ -]", value)
    # Either one unbroken run or the groupings cards are printed in (4-4-4-4[-3], 4-6-5, 4-6-4).
    lengths = [len(g) for g in groups]
    return len(groups) == 1 or (lengths[0] == 4 and all(3 <= n <= 6 for n in lengths[1:]))


def _national_phone_ok(value: str) -> bool:
    digits = v.digits_of(value)
    return 9 <= len(digits) <= 11 and len(set(digits)) > 2


def _iban_length(value: str) -> int | None:
    """Accept the shortest prefix of the candidate that is a valid IBAN of its country's length."""
    compact = 0
    for i, ch in enumerate(value):
        if ch.isalnum():
            compact += 1
            if compact >= 15 and v.iban_ok(value[: i + 1]):
                return i + 1
    return None


def _is_placeholder_email(value: str) -> bool:
    local, _, domain = value.lower().rpartition("@")
    return domain in ("example.invalid",) or local in ("noreply-placeholder",)


PII_RULES: list[Rule] = [
    Rule("email", "EMAIL_ADDRESS", _PII,
         # letters are Unicode ones (RFC 6531/IDN: josé.garcía@correo.es, info@bücher.de)
         re.compile(r"(?<![\w.+%-])[^\W_](?:[\w.%+'-]{0,62}[\w%+-])?"
                    r"@(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+[^\W\d_]{2,24}(?![\w-])"),
         score=1.0, hints=("@",), reject_value=_is_placeholder_email, anchor=_AT,
         reject_before=_MESSAGE_ID_BEFORE),
    Rule("phone_nanp", "PHONE_NUMBER", _PII,
         re.compile(r"(?<![\w+-])(?:\+?1[ .-]?)?(?:\([2-9]\d{2}\)[ .-]?|[2-9]\d{2}[ .-])\d{3}[ .-]\d{4}(?![\w-])"),
         score=0.85, validate=phones.possible_nanp, anchor=_DIGITS),
    Rule("phone_334_context", "PHONE_NUMBER", _PII,
         # 123-456-7890 and friends: not dialable in the NANP, but what people write as "my number".
         re.compile(r"(?<![\w+-])\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?![\w-])"),
         score=0.6, validate=phones.not_reserved_nanp, context=_PHONE_CONTEXT,
         needs_context=True, anchor=_DIGITS),
    Rule("phone_nanp_context", "PHONE_NUMBER", _PII,
         re.compile(r"(?<![\w+-])1?[2-9]\d{2}[2-9]\d{6}(?![\w-])"),
         score=0.7, validate=phones.not_reserved_nanp, context=_PHONE_CONTEXT, needs_context=True, anchor=_DIGITS),
    Rule("phone_international", "PHONE_NUMBER", _PII,
         re.compile(r"(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,5}\)?){2,6}(?![\w])"),
         score=0.85, hints=("+",), validate=phones.international_ok, anchor=_DIGITS),
    Rule("phone_00_international", "PHONE_NUMBER", _PII,
         # 0049 30 1234567: "00" is the international prefix dialled from most of Europe
         re.compile(r"(?<![\w+.-])00[1-9]\d{0,2}(?:[ .-]?\(?\d{1,5}\)?){2,6}(?![\w-]|\.\d)"),
         score=0.8, validate=phones.possible_with_00, anchor=_DIGITS),
    Rule("phone_eu_national", "PHONE_NUMBER", _PII,
         # 030/1234567, 030 1234567, 06 12 34 56 78, 07700 900123, 020 7946 0958: trunk 0, then
         # groups split by spaces, a slash or dashes (dots only in the French pairs: 06.12.34.56.78;
         # other dotted runs are dates and versions); valid in a European numbering plan.
         re.compile(r"(?<![\w+./-])(?:\(0\d{1,4}\)|0\d{1,4})(?:(?:[ /-]|\) ?)\d{2,8}){1,4}(?![\w-]|[./]\d)"
                    r"|(?<![\w+./-])0[1-9](?:\.\d{2}){4}(?![\w-]|[./]\d)"),
         score=0.75, validate=phones.eu_national_ok, anchor=_DIGITS),
    Rule("phone_national_context", "PHONE_NUMBER", _PII,
         re.compile(r"(?<![\w+.-])(?:0\d{1,4}|\(0\d{1,4}\))(?:[ .-]?\d{2,4}){2,4}(?![\w-]|\.\d)"),
         score=0.7, validate=_national_phone_ok, context=_PHONE_CONTEXT, needs_context=True, anchor=_DIGITS),
    Rule("credit_card", "CREDIT_CARD", _PII,
         re.compile(r"(?<![\w.-])\d{4}(?:[ -]?\d{3,6}){2,4}(?![\w-]|\.\d)"),
         score=1.0, validate=_card_ok, anchor=_DIGITS),
    Rule("iban", "IBAN_CODE", _PII,
         re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]){11,32}"),
         score=1.0, accept=_iban_length, anchor=_COUNTRY_CODE),
    Rule("ipv4", "IP_ADDRESS", _PII,
         re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)"),
         score=0.8, validate=lambda value: v.ipv4_ok(value) and ip_is_public(value) and not _small_octets(value),
         reject_before=_VERSION_BEFORE, anchor=_DIGITS),
    Rule("ipv4_small_octets", "IP_ADDRESS", _PII,
         # "Git 1.8.1.4", "fixed in 1.5.4.1", "section 2.3.1.4": four small numbers are far more often a
         # version or a section than a host, so they need a network word before them
         re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)"),
         score=0.7, validate=lambda value: v.ipv4_ok(value) and ip_is_public(value) and _small_octets(value),
         reject_before=_VERSION_BEFORE, context=_IP_CONTEXT, needs_context=True, anchor=_DIGITS),
    Rule(PRIVATE_IP_RULES[0], "IP_ADDRESS", _PII,
         re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)"),
         score=0.8, validate=lambda value: v.ipv4_ok(value) and not ip_is_public(value),
         reject_before=_VERSION_BEFORE, anchor=_DIGITS),
    Rule("ipv6", "IP_ADDRESS", _PII,
         re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,7}(?::|(?::[0-9A-Fa-f]{1,4}){1,6}|[0-9A-Fa-f]{1,4})(?![\w:])"),
         score=0.8, hints=(":",), validate=lambda value: v.ipv6_ok(value) and ip_is_public(value), anchor=_HEX_COLON),
    Rule(PRIVATE_IP_RULES[1], "IP_ADDRESS", _PII,
         re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,7}(?::|(?::[0-9A-Fa-f]{1,4}){1,6}|[0-9A-Fa-f]{1,4})(?![\w:])"),
         score=0.8, hints=(":",), validate=lambda value: v.ipv6_ok(value) and not ip_is_public(value),
         anchor=_HEX_COLON),
    Rule("us_ssn", "US_SSN", _PII,
         re.compile(r"(?<![\w-])\d{3}([- ])\d{2}\1\d{4}(?![\w-])"),
         score=0.85, validate=v.us_ssn_ok, anchor=_DIGITS),
    Rule("us_ssn_context", "US_SSN", _PII,
         re.compile(r"(?<![\w-])\d{9}(?![\w-])"),
         score=0.7, validate=v.us_ssn_ok, context=("ssn", "social security", "ss#", "ss #"), needs_context=True, anchor=_DIGITS),
    Rule("uk_nino", "UK_NINO", _PII,
         re.compile(r"(?<![\w])[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![\w])"),
         score=0.9, validate=v.uk_nino_ok, anchor=_COUNTRY_CODE),
    Rule("uk_nhs", "UK_NHS", _PII,
         re.compile(r"(?<![\w-])\d{3}([ -]?)\d{3}\1\d{4}(?![\w-])"),
         score=0.9, validate=v.uk_nhs_ok, context=("nhs", "health service", "patient"), needs_context=True, anchor=_DIGITS),
    Rule("ca_sin", "CA_SIN", _PII,
         re.compile(r"(?<![\w-])\d{3}([ -]?)\d{3}\1\d{3}(?![\w-])"),
         score=0.9, validate=v.ca_sin_ok, context=("sin", "social insurance", "nas"), needs_context=True, anchor=_DIGITS),
    Rule("es_dni", "ES_DNI", _PII,
         re.compile(r"(?<![\w-])(?:\d{8}|[XYZ]\d{7})-?[A-Z](?![\w-])"),
         score=0.9, validate=v.es_dni_ok, anchor=_DIGITS),
    Rule("in_aadhaar", "IN_AADHAAR", _PII,
         re.compile(r"(?<![\w-])[2-9]\d{3}([ -]?)\d{4}\1\d{4}(?![\w-])"),
         score=0.9, validate=v.in_aadhaar_ok, context=("aadhaar", "aadhar", "uidai", "uid"), needs_context=True, anchor=_DIGITS),
    Rule("nl_bsn", "NL_BSN", _PII,
         re.compile(r"(?<![\w-])\d{4}\.?\d{2}\.?\d{3}(?![\w-])"),
         score=0.9, validate=v.nl_bsn_ok, context=("bsn", "burgerservicenummer", "sofinummer"), needs_context=True, anchor=_DIGITS),
    Rule("it_fiscal_code", "IT_FISCAL_CODE", _PII,
         re.compile(r"\b[A-Za-z]{6}[0-9LMNPQRSTUV]{2}[A-Za-z][0-9LMNPQRSTUV]{2}[A-Za-z][0-9LMNPQRSTUV]{3}[A-Za-z](?![\w])"),
         score=0.9, validate=v.it_fiscal_code_ok),
    Rule("de_tax_id", "DE_TAX_ID", _PII,
         # Steuer-ID: 11 digits (often 2-3-3-3); the check digit passes one number in ten, so a cue is needed
         re.compile(r"(?<![\w-])[1-9]\d(?:[ ]?\d{3}){3}(?![\w-])"),
         score=0.9, validate=de_tax_id_ok, context=("steuer", "idnr", "id-nr", "identifikationsnummer", "tax id",
                                                   "tin", "tax identification"),
         needs_context=True, anchor=_DIGITS),
    Rule("fr_nir", "FR_NIR", _PII,
         # numéro de sécurité sociale: 1 84 12 75 123 456 78 (15 characters, mod-97 key)
         re.compile(r"(?<![\w-])[1-478] ?\d{2} ?\d{2} ?(?:\d{2}|2[ABab]) ?\d{3} ?\d{3} ?\d{2}(?![\w-])"),
         score=0.9, validate=fr_nir_ok, anchor=_DIGITS),
    Rule("medical_record_number", "MEDICAL_RECORD_NUMBER", _PII,
         re.compile(r"\b(?:mrn|medical record (?:number|no\.?|#)|patient id)\s*[:#]?\s*(?P<value>[a-z]{0,3}-?\d{5,10})\b"),
         score=0.85, group="value", hints=("mrn", "medical record", "patient id"), on_lowered=True),
    Rule("btc_base58", "CRYPTO_WALLET", _PII,
         re.compile(r"\b[13][1-9A-HJ-NP-Za-km-z]{25,34}(?![\w])"),
         score=1.0, validate=v.base58check_ok),
    Rule("btc_bech32", "CRYPTO_WALLET", _PII,
         re.compile(r"\b(?:bc|tb|ltc|BC|TB|LTC)1[02-9ac-hj-np-zAC-HJ-NP-Z]{8,87}(?![\w])"),
         score=1.0, validate=v.bech32_ok),
    Rule("eth_address", "CRYPTO_WALLET", _PII,
         re.compile(r"\b0x[0-9a-fA-F]{40}(?![\w])"),
         score=0.9, hints=("0x",), validate=v.eth_address_ok),
]

PII_RULES += DOB_RULES + ADDRESS_RULES + INTL_ADDRESS_RULES + OBFUSCATED_EMAIL_RULES

PII_ENTITIES: frozenset[str] = frozenset(rule.entity for rule in PII_RULES)

# National identifiers and health records: a finding raises the request's data class to the policy's most restricted
# class by default (DESIGN.md: "a detector finding can raise a request's class, never lower it").
RESTRICTED_PII: frozenset[str] = frozenset(
    {"US_SSN", "UK_NINO", "UK_NHS", "CA_SIN", "ES_DNI", "IN_AADHAAR", "NL_BSN", "IT_FISCAL_CODE", "DE_TAX_ID", "FR_NIR",
     "MEDICAL_RECORD_NUMBER"})
