"""Postal addresses (US, UK, German, French): street + house number, with a postcode or a cue.

A street name and a number alone are often not an address ("Main Street 5 was closed" is rare,
"10 Downing Street" is famous, "Route 66" is a road), so each country's rule fires on its own for
the full form with postcode and town, while the street line alone needs a cue word just
before it ("address", "lives at", "ship to", "Anschrift", "wohnhaft", "domicilié" ...). Patterns
only: a street written without its type word ("12 Acacia") or a PO box is not found.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.findings import Category
from kvfence.gateway.protection.rules import Rule

__all__ = ["ADDRESS_CUES", "ADDRESS_RULES"]

_PII = Category.PII

ADDRESS_CUES = ("address", "addr", "live at", "lives at", "living at", "located at", "reside", "ship to",
                "deliver to", "send it to", "mail to", "visit us at", "moved to", "move to",
                "anschrift", "adresse", "wohnhaft", "wohne in", "wohnt in", "lieferadresse", "domicilié", "domicile",
                "demeurant", "habite", "dirección", "indirizzo", "straße:", "street:")

_CAP = r"[A-Z][A-Za-z'’.-]{0,30}"                               # a capitalised word of a street or town name
_US_TYPE = (r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl|Way|Terrace"
            r"|Ter|Parkway|Pkwy|Circle|Cir|Highway|Hwy|Square|Sq|Trail|Trl)")
_UNIT = r"(?:,?\s{1,3}(?:Apt|Apartment|Suite|Ste|Unit|Fl|Floor|#)\.?\s{0,3}#?[\w-]{1,6})?"
_US_STATE = (r"(?:A[KLRZ]|C[AOT]|D[CE]|FL|GA|HI|I[ADLN]|K[SY]|LA|M[ADEINOST]|N[CDEHJMVY]|O[HKR]|PA|RI|S[CD]|T[NX]"
             r"|UT|V[AT]|W[AIVY])")
_US_STREET = (rf"\b\d{{1,6}}[A-Z]?\s{{1,3}}(?:[NSEW]\.?\s{{1,3}})?(?:{_CAP}\s{{1,3}}){{1,4}}{_US_TYPE}\b\.?"
              rf"(?:\s{{1,3}}(?:[NS][EW]|[NSEW])\b)?{_UNIT}")
_US_TAIL = rf",?\s{{1,3}}(?:{_CAP}\s{{1,3}}){{0,3}}{_CAP},?\s{{1,3}}{_US_STATE}\s{{1,3}}\d{{5}}(?:-\d{{4}})?\b"

_UK_TYPE = (r"(?:Street|Road|Lane|Avenue|Close|Crescent|Drive|Gardens|Place|Square|Terrace|Way|Court|Grove|Hill"
            r"|Mews|Row|Walk|Park|Rise|View|Green|Parade)")
_UK_POSTCODE = r"(?:[A-PR-UWYZ][A-HK-Y]?\d[A-Z\d]?\s?\d[ABD-HJLNP-UW-Z]{2})"
_UK_STREET = rf"\b\d{{1,4}}[A-Za-z]?,?\s{{1,3}}(?:{_CAP}\s{{1,3}}){{1,3}}{_UK_TYPE}\b"
_UK_TAIL = rf"(?:,\s{{0,3}}(?:{_CAP}\s{{0,3}}){{1,3}}){{0,2}},?\s{{1,3}}{_UK_POSTCODE}\b"

_DE_TYPE = r"(?:straße|strasse|str\.|weg|allee|platz|gasse|damm|ufer|chaussee|steig|pfad)"
_DE_WORD_TYPE = r"(?:Straße|Strasse|Str\.|Weg|Allee|Platz|Gasse|Ring|Damm|Ufer|Chaussee)"
_DE_NAME = (rf"(?:[A-ZÄÖÜ][a-zäöüß]{{1,30}}(?:-[A-ZÄÖÜ]?[a-zäöüß]{{1,30}}){{0,4}}?(?:{_DE_TYPE}|-{_DE_WORD_TYPE})"
            rf"|(?:[A-ZÄÖÜ][\wäöüß.-]{{0,30}}\s{{1,3}}){{1,3}}{_DE_WORD_TYPE})")
_DE_STREET = rf"\b{_DE_NAME}\s{{0,3}}\d{{1,4}}(?:\s?[a-z])?(?:\s?[-/]\s?\d{{1,4}}[a-z]?)?\b"
_DE_TAIL = r",?\s{1,3}(?:D-)?\d{5}\s{1,3}[A-ZÄÖÜ][\wäöüß-]{1,30}(?:\s{1,3}(?:am|an der|im|in|bei)\s{1,3}[A-ZÄÖÜ][\wäöüß-]{1,30})?"

_FR_TYPE = (r"(?:rue|avenue|av\.|boulevard|bd|place|chemin|allée|allee|impasse|quai|route|cours|square|passage"
            r"|faubourg|rond-point)")
_FR_STREET = (rf"\b\d{{1,4}}(?:\s?(?:bis|ter|[A-C]))?,?\s{{1,3}}{_FR_TYPE}\s{{1,3}}(?:(?:de\s{{1,3}}la|de\s{{1,3}}l'|du|des|de|d'|la|le|les)\s{{0,3}})?"
              rf"[A-ZÉÈ][\w'’-]{{0,30}}(?:\s{{1,3}}(?:de\s{{1,3}}la|de\s{{1,3}}l'|du|des|de|d'|la|le|les|et|[A-ZÉÈ][\w'’-]{{0,30}})){{0,4}}"
              r"(?![\w'’-])")
_FR_TAIL = r",?\s{1,3}\d{5}\s{1,3}[A-ZÉÈ][\w'’-]{0,30}(?:[\s-]{1,3}[A-ZÉÈ][\w'’-]{0,30}){0,3}"


def _rule(country: str, street: str, tail: str, flags: int = 0) -> Rule:
    return Rule(f"address_{country}", "POSTAL_ADDRESS", _PII, re.compile(f"{street}(?P<tail>{tail})?", flags),
                score=0.8, context=ADDRESS_CUES, needs_context=True, context_waived_by="tail")


ADDRESS_RULES: list[Rule] = [
    _rule("us", _US_STREET, _US_TAIL),
    _rule("uk", _UK_STREET, _UK_TAIL),
    _rule("de", _DE_STREET, _DE_TAIL),
    _rule("fr", _FR_STREET, _FR_TAIL, re.IGNORECASE),
]
