"""The detectors added for European formats and the false positives found by the last sweep: EU phone
formats, German Steuer-ID and French NIR, dates of birth, postal addresses; private IP ranges and
reserved / toll-free NANP numbers are not personal data."""

from __future__ import annotations

import pytest

from kvfence.gateway.protection.detect.detector import build_detector
from kvfence.gateway.protection.detect.recognizers.dob import plausible_birth_date
from kvfence.gateway.protection.detect.recognizers.id_checks import de_tax_id_ok, fr_nir_ok
from kvfence.gateway.protection.detect.recognizers.phone_checks import nanp_ok

DEFAULT = build_detector(use_presidio=False)
WITH_PRIVATE_IPS = build_detector(use_presidio=False, private_ips=True)


def found(text: str, detector=DEFAULT) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return {(f.entity, text[f.start:f.end]) for f in detector.scan(text)}


def _nir(body: str) -> str:
    """``body`` (13 characters, spaced) with its key: 97 - NIR mod 97, Corsica's 2A/2B read as 19/18."""
    compact = body.replace(" ", "")
    number = int(compact[:5] + {"2A": "19", "2B": "18"}.get(compact[5:7], compact[5:7]) + compact[7:])
    return f"{body} {97 - number % 97:02d}"


NIR = _nir("1 84 12 75 123 456")
NIR_CORSICA = _nir("2 91 05 2A 004 017")

POSITIVES = [
    # phones: "00" international prefix, "(0)" trunk, German slash, French pairs, UK national
    ("Ruf an: 0049 30 1234567", "PHONE_NUMBER", "0049 30 1234567"),
    ("Tel. +49 (0)30 1234567", "PHONE_NUMBER", "+49 (0)30 1234567"),
    ("Büro 030/1234567, Fax 030/1234568", "PHONE_NUMBER", "030/1234567"),
    ("Rufnummer 089 12345678", "PHONE_NUMBER", "089 12345678"),
    ("mon portable 06 12 34 56 78", "PHONE_NUMBER", "06 12 34 56 78"),
    ("écris au 06.12.34.56.78 ce soir", "PHONE_NUMBER", "06.12.34.56.78"),
    ("text 07700 900123 when you land", "PHONE_NUMBER", "07700 900123"),
    ("London office: +44 20 7946 0958", "PHONE_NUMBER", "+44 20 7946 0958"),
    ("switchboard 020 7946 0958", "PHONE_NUMBER", "020 7946 0958"),
    ("chiamami allo 0033 6 12 34 56 78", "PHONE_NUMBER", "0033 6 12 34 56 78"),
    # national IDs with checksums
    ("Steuer-ID: 86095742719", "DE_TAX_ID", "86095742719"),
    ("Steuerliche Identifikationsnummer 86 095 742 719", "DE_TAX_ID", "86 095 742 719"),
    (f"n° de sécurité sociale {NIR}", "FR_NIR", NIR),
    (f"NIR {NIR_CORSICA}", "FR_NIR", NIR_CORSICA),
    ("NINO AB 12 34 56 C", "UK_NINO", "AB 12 34 56 C"),
    ("DNI 12345678Z", "ES_DNI", "12345678Z"),
    ("NIE X1234567L", "ES_DNI", "X1234567L"),
    ("codice fiscale RSSMRA85T10A562S", "IT_FISCAL_CODE", "RSSMRA85T10A562S"),
    ("BSN 111222333", "NL_BSN", "111222333"),
    # dates of birth
    ("Patient born 12.03.1984 in Bonn", "DATE_OF_BIRTH", "12.03.1984"),
    ("DOB: 1984-03-12", "DATE_OF_BIRTH", "1984-03-12"),
    ("date of birth: March 12, 1984", "DATE_OF_BIRTH", "March 12, 1984"),
    ("D.O.B. 03/12/84", "DATE_OF_BIRTH", "03/12/84"),
    ("born on the 4th of July 1976", "DATE_OF_BIRTH", "4th of July 1976"),
    ("Geburtsdatum: 12. März 1984", "DATE_OF_BIRTH", "12. März 1984"),
    ("née le 3 janvier 1990 à Lyon", "DATE_OF_BIRTH", "3 janvier 1990"),
    ("fecha de nacimiento: 12 de marzo de 1984", "DATE_OF_BIRTH", "12 de marzo de 1984"),
    # postal addresses
    ("Ship to 1600 Pennsylvania Avenue NW, Washington, DC 20500 please", "POSTAL_ADDRESS",
     "1600 Pennsylvania Avenue NW, Washington, DC 20500"),
    ("My address is 742 Evergreen Terrace, Springfield.", "POSTAL_ADDRESS", "742 Evergreen Terrace"),
    ("Office: 350 Fifth Avenue, New York, NY 10118", "POSTAL_ADDRESS", "350 Fifth Avenue, New York, NY 10118"),
    ("write to 221B Baker Street, London NW1 6XE", "POSTAL_ADDRESS", "221B Baker Street, London NW1 6XE"),
    ("Anschrift: Hauptstraße 12, 10115 Berlin", "POSTAL_ADDRESS", "Hauptstraße 12, 10115 Berlin"),
    ("Berliner Straße 5, 60311 Frankfurt am Main", "POSTAL_ADDRESS", "Berliner Straße 5, 60311 Frankfurt am Main"),
    ("Ich wohne in der Karl-Marx-Allee 34 in Berlin", "POSTAL_ADDRESS", "Karl-Marx-Allee 34"),
    ("Adresse : 12 rue de la Paix, 75002 Paris", "POSTAL_ADDRESS", "12 rue de la Paix, 75002 Paris"),
    ("Il habite au 8 bis avenue des Champs-Élysées", "POSTAL_ADDRESS", "8 bis avenue des Champs-Élysées"),
    # public IP addresses stay personal data
    ("login from 81.2.69.142 failed", "IP_ADDRESS", "81.2.69.142"),
    ("peer 2a00:1450:4001:80b::200e", "IP_ADDRESS", "2a00:1450:4001:80b::200e"),
    ("ssh login from 5.2.14.9 rejected", "IP_ADDRESS", "5.2.14.9"),  # small octets, but a network word
]

NEGATIVES = [
    # NANP numbers nobody has: exchange or area code starting with 0/1, 555-01xx fiction, toll free
    "call +1 (800) 000-0000 for support",
    "support line +1 800 555 1234",
    "sample number (212) 555-0123 from the style guide",
    "toll free 1-888-234-5678, premium +1 900 234 5678",
    # private, loopback, shared, link-local and documentation ranges: machines, not people
    "bind to 10.0.0.1 and 192.168.1.20, gateway 172.16.0.1, CGNAT 100.64.3.2, link 169.254.1.1",
    "ApiContract', '1.0.0.0' and network 81.0.0.0",  # a /8 network (or a version), no host
    "Git 1.8.1.4 Release Notes: fixed in 1.5.4.1.",  # versions: four small numbers, no network word
    "docs use 192.0.2.10, 198.51.100.7, 203.0.113.99 and 2001:db8::1, fe80::1ff:fe23:4567:890a",
    # dates that are not birth dates
    "released 12.03.2024, due 2025-01-31, meeting on March 12, 1984 was long",
    "born to run, then on 12.03.2024 we shipped",  # the cue and the date are a sentence apart
    "DOB field is 31/02/1990 which is no date",
    "DOB: 2090-01-01",
    # numbers that fail the checksum / structure
    "Steuer-ID: 12345678901",
    "NIR 1 84 12 75 123 456 00",
    "order 0123 456789 ships Monday",  # not a valid number anywhere
    "Bestellung 0207 386867 vom 12.03.2024",  # context words count at a word start: no "tel" in "Bestellung"
    "Kundennummer 030 1234567",  # a bare German-shaped number without a phone word is no phone
    "version 06.12.34 and build 03.12.2024",
    # street-ish text that is not an address
    "we fixed 3 Main Street bugs and the Spring 2024 release",
    "Section 4 Road safety; see 5 Ways Avenue (the film)",
]


@pytest.mark.parametrize(("text", "entity", "value"), POSITIVES)
def test_finds_personal_data(text: str, entity: str, value: str) -> None:
    assert (entity, value) in found(text)


@pytest.mark.parametrize("text", NEGATIVES)
def test_ignores_lookalikes(text: str) -> None:
    assert found(text) == set()


def test_private_ips_are_personal_data_when_the_policy_says_so() -> None:
    text = "bind to 10.0.0.1, docs 2001:db8::1, public 81.2.69.142"
    assert found(text) == {("IP_ADDRESS", "81.2.69.142")}
    assert found(text, WITH_PRIVATE_IPS) == {("IP_ADDRESS", "10.0.0.1"), ("IP_ADDRESS", "2001:db8::1"),
                                              ("IP_ADDRESS", "81.2.69.142")}


def test_private_ips_switch_is_a_policy_field() -> None:
    from kvfence.gateway.protection.config import parse_protection_config

    assert parse_protection_config({}).private_ips is False
    assert parse_protection_config({"private_ips": True}).private_ips is True


@pytest.mark.parametrize(("number", "ok"), [
    ("2125550123", False), ("2125550200", True), ("8005551234", False), ("8885551234", False),
    ("2120551234", False), ("0125551234", False), ("9115551234", False), ("2129111234", False),
    ("12125550200", True), ("9002345678", False),
])
def test_nanp_structure(number: str, ok: bool) -> None:
    assert nanp_ok(number) is ok


def test_tax_id_checksum_catches_every_single_digit_error() -> None:
    valid = "86095742719"
    assert de_tax_id_ok(valid)
    for i in range(11):
        for d in "0123456789":
            if d != valid[i]:
                assert not de_tax_id_ok(valid[:i] + d + valid[i + 1:]), (i, d)


def test_nir_key_catches_every_single_digit_error() -> None:
    compact = NIR.replace(" ", "")
    assert fr_nir_ok(compact)
    for i in range(15):
        for d in "0123456789":
            if d != compact[i]:
                assert not fr_nir_ok(compact[:i] + d + compact[i + 1:]), (i, d)


@pytest.mark.parametrize(("value", "ok"), [
    ("29.02.1984", True), ("29.02.1985", False), ("12/31/1999", True), ("31/12/1999", True), ("13/13/1999", False),
    ("1899-12-31", False), ("1 March 1984", True), ("March 32, 1984", False),
])
def test_birth_date_must_be_a_real_past_date(value: str, ok: bool) -> None:
    assert plausible_birth_date(value) is ok
