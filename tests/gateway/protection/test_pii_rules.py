"""Personal-data rules: each entity's formats are found, its look-alikes (ids, hashes, versions) are not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvfence.gateway.protection.detect.recognizers import validators as v
from kvfence.gateway.protection.detect.recognizers.pii import PII_RULES
from kvfence.gateway.protection.detect.scanner import RuleSet

RULES = RuleSet(PII_RULES)


def found(text: str) -> set[tuple[str, str]]:
    return {(f.entity, text[f.start:f.end]) for f in RULES.scan(text)}


POSITIVES = [
    ("Write to maria.lopez+billing@northwind-traders.co.uk today", "EMAIL_ADDRESS", "maria.lopez+billing@northwind-traders.co.uk"),
    # an apostrophe is legal inside a local part (RFC 5322) and common in names: the whole address goes
    ("mail sean.o'neill@mail.corp.example.org or 'ann@acme.io'", "EMAIL_ADDRESS", "sean.o'neill@mail.corp.example.org"),
    ("mail sean.o'neill@mail.corp.example.org or 'ann@acme.io'", "EMAIL_ADDRESS", "ann@acme.io"),
    ("mi correo es josé.garcía@correo.es", "EMAIL_ADDRESS", "josé.garcía@correo.es"),
    ("Bestellung an info@bücher-müller.de senden", "EMAIL_ADDRESS", "info@bücher-müller.de"),
    ("call (415) 555-0132 after 5pm", "PHONE_NUMBER", "(415) 555-0132"),
    ("my cell is 212.555.0199", "PHONE_NUMBER", "212.555.0199"),
    ("call me at 123-456-7890 tonight", "PHONE_NUMBER", "123-456-7890"),
    # exchange 123 cannot be dialled in the NANP; with a phone word it is still what the user calls their number
    ("call the desk on (555) 123-4567", "PHONE_NUMBER", "(555) 123-4567"),
    ("SSN 123-45-6789 (the famous sample) still leaves no gateway", "US_SSN", "123-45-6789"),
    ("WhatsApp +44 7700 900123 please", "PHONE_NUMBER", "+44 7700 900123"),
    ("Tel.: +49 30 901820", "PHONE_NUMBER", "+49 30 901820"),
    ("appelle-moi au tel 06 12 34 56 78", "PHONE_NUMBER", "06 12 34 56 78"),
    ("card 4539 1488 0343 6467 exp 11/27", "CREDIT_CARD", "4539 1488 0343 6467"),
    ("amex 3714-496353-98431", "CREDIT_CARD", "3714-496353-98431"),
    ("Maestro 6759 6498 2643 8453", "CREDIT_CARD", "6759 6498 2643 8453"),
    ("Maestro 5018 0000 0009", "CREDIT_CARD", "5018 0000 0009"),
    ("pay to DE89 3704 0044 0532 0130 00 by Friday", "IBAN_CODE", "DE89 3704 0044 0532 0130 00"),
    ("IBAN: GB29NWBK60161331926819.", "IBAN_CODE", "GB29NWBK60161331926819"),
    ("login from 203.0.113.77 failed", "IP_ADDRESS", "203.0.113.77"),
    ("upstream app {\n  server 190.159.44.171:8080;\n}", "IP_ADDRESS", "190.159.44.171"),  # "ser-ver" is no version
    ("peer 2001:db8:85a3::8a2e:370:7334 dropped", "IP_ADDRESS", "2001:db8:85a3::8a2e:370:7334"),
    ("SSN 536-22-1234 on file", "US_SSN", "536-22-1234"),
    ("social security number: 536221234", "US_SSN", "536221234"),
    ("NI number JG 10 37 46 A", "UK_NINO", "JG 10 37 46 A"),
    ("NHS number 943 476 5919", "UK_NHS", "943 476 5919"),
    ("SIN: 130 692 544", "CA_SIN", "130 692 544"),
    ("DNI 12345678Z", "ES_DNI", "12345678Z"),
    ("Aadhaar 2345 6789 0124", "IN_AADHAAR", "2345 6789 0124"),
    ("BSN 111222333", "NL_BSN", "111222333"),
    ("codice fiscale RSSMRA85T10A562S", "IT_FISCAL_CODE", "RSSMRA85T10A562S"),
    ("send BTC to 1BoatSLRHtKNngkdXEeobR76b53LETtpyT", "CRYPTO_WALLET", "1BoatSLRHtKNngkdXEeobR76b53LETtpyT"),
    ("bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq is mine", "CRYPTO_WALLET", "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq"),
    ("Patient MRN: 00482913 admitted", "MEDICAL_RECORD_NUMBER", "00482913"),
    ("medical record number MR-7734120", "MEDICAL_RECORD_NUMBER", "MR-7734120"),
    ("eth 0x52908400098527886E0F7030069857D2E4169EE7", "CRYPTO_WALLET", "0x52908400098527886E0F7030069857D2E4169EE7"),
]

NEGATIVES = [
    "request id 3f2c9a1e-8b7d-4c6e-9f01-23456789abcd",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    "upgrade to version 10.4.2.1 tomorrow",
    "released v2.31.0.7 on 2024-03-15",
    "order #4539148803436468 shipped",  # fails Luhn
    "invoice 2024-000123-77, total 1,234.56 EUR",
    "timestamp 2024-03-15T12:30:45Z and 12:30:45.123",
    "tracking 1Z999AA10123456784",
    "OID 1.3.6.1.4.1.311",
    "phone field left blank: 000-000-0000",
    "SSN 000-12-3456 is invalid",
    "part number 123-456-7890 in the catalogue",  # no phone word nearby
    "bank code DE00 1234 5678 9012 3456 78 (bad checksum)",
    "the module at 0x0000000000000000000000000000000000000000",
    "decorator @app.route and npm package left-pad@1.3.0",
    "user@localhost cannot receive mail",
    "page 123 456 7890 of the archive",  # no context, NANP area codes cannot start with 1
    "temperature 36.6 and pH 7.35",
    "bind to 127.0.0.1 or 0.0.0.0 in development",
    "the MRN field is required; see record 12 of 40",
]


@pytest.mark.parametrize(("text", "entity", "value"), POSITIVES)
def test_finds_personal_data(text: str, entity: str, value: str) -> None:
    assert (entity, value) in found(text)


@pytest.mark.parametrize("text", NEGATIVES)
def test_ignores_lookalikes(text: str) -> None:
    assert found(text) == set()


def _luhn_complete(prefix: str) -> str:
    for digit in "0123456789":
        if v.luhn_ok(prefix + digit):
            return prefix + digit
    raise AssertionError("unreachable")


@given(st.from_regex(r"4[0-9]{14}", fullmatch=True))
def test_any_luhn_valid_visa_is_found(prefix: str) -> None:
    number = _luhn_complete(prefix)
    if len(set(number)) == 1:
        return
    grouped = " ".join(number[i:i + 4] for i in range(0, 16, 4))
    assert ("CREDIT_CARD", grouped) in found(f"paid with {grouped} yesterday")


@given(st.integers(min_value=10**9, max_value=10**10 - 1))
def test_iban_checksum_rejects_single_digit_errors(account: int) -> None:
    bban = f"37040044{account:010d}"
    check = 98 - int("".join(str(int(c, 36)) for c in bban + "DE00")) % 97
    iban = f"DE{check:02d}{bban}"
    assert v.iban_ok(iban)
    mutated = iban[:-1] + str((int(iban[-1]) + 1) % 10)
    assert not v.iban_ok(mutated)


@given(st.text(max_size=200))
def test_scan_never_crashes_and_spans_are_in_bounds(text: str) -> None:
    for finding in RULES.scan(text):
        assert 0 <= finding.start < finding.end <= len(text)
