"""Postal addresses (US, UK, German, French): street + house number, with a postcode or a cue.

A street name and a number alone are often not an address ("Main Street 5 was closed" is rare,
"10 Downing Street" is famous, "Route 66" is a road), so each country's rule fires on its own for
the full form with postcode and town, while the street line alone needs a cue word just
before it ("address", "lives at", "ship to", "Anschrift", "wohnhaft", "domicilié" ...).

A street written without its type word ("12 Acacia", "Jungfernstieg 7", "Unter den Linden 77") is
found only with the rest of the address after it (US: town, state and ZIP; UK: town and postcode;
DE: postcode and a town that ends the line), since "Kapitel 3" or "Room 12" alone is no address; a
German street opened by a preposition ("Am Alten Markt 3", "An der Alster 5") is also found after a
cue word. The French box abbreviations "BP 45", "CS 30001", "TSA 70011" (BP is also blood
pressure, a company) are found only with their postcode and town or after a cue; the other
post-office boxes, which need neither, are one rule of ``address_intl.py`` with every country's tail.
The US, UK and German tails are exported for it (``US_TAIL``, ``UK_TAIL``).
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.recognizers.address_parts import BUILDING_WORD, TOWN
from kvfence.gateway.protection.detect.scanner import Anchor, Rule

__all__ = ["ADDRESS_CUES", "ADDRESS_RULES", "UK_TAIL", "US_TAIL"]

_PII = Category.PII

ADDRESS_CUES = ("address", "addr", "live at", "lives at", "living at", "located at", "reside", "ship to",
                "deliver to", "send it to", "mail to", "visit us at", "moved to", "move to",
                "anschrift", "adresse", "wohnhaft", "wohne in", "wohnt in", "lieferadresse", "domicilié", "domicile",
                "demeurant", "habite", "dirección", "indirizzo", "straße:", "street:")

_CAP = r"[A-Z][A-Za-z'’.-]{0,30}"                               # a capitalised word of a street or town name
_US_TYPE = (r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl|Way|Terrace"
            r"|Ter|Parkway|Pkwy|Circle|Cir|Highway|Hwy|Square|Sq|Trail|Trl|Loop|Mall|Plaza|Alley|Pike|Row)")
# a street word: capitalised, or an ordinal ("5th Ave", "W 38th St")
_US_WORD = rf"(?:{_CAP}|\d{{1,3}}(?:st|nd|rd|th))"
# the house number: digits, or a number word ("One Microsoft Way")
_US_NUMBER = r"(?:\d{1,6}(?:[-–]\d{1,6})?[A-Z]?|One|Two|Three|Four|Five|Six|Seven|Eight|Nine|Ten)"  # 123-125, 37-12
# a unit word is a whole word: "Fl" is no floor in ", Flushing"
_UNIT = (r"(?:,?\s{1,3}(?:(?:(?:Apt|Apartment|Suite|Ste|Unit|Fl|Floor)\b|#)\.?\s{0,3}#?[\w-]{1,6}"
         r"|\d{1,3}(?:st|nd|rd|th)\s(?:Floor|Fl\.?)))?")
_US_STATE = (r"(?:A[KLRZ]|C[AOT]|D[CE]|FL|GA|HI|I[ADLN]|K[SY]|LA|M[ADEINOST]|N[CDEHJMVY]|O[HKR]|PA|RI|S[CD]|T[NX]"
             r"|UT|V[AT]|W[AIVY])")
_US_STREET = (rf"\b{_US_NUMBER}\s{{1,3}}(?:[NSEW]\.?\s{{1,3}})?(?:{_US_WORD}\s{{1,3}}){{1,4}}{_US_TYPE}\b\.?"
              rf"(?:\s{{1,3}}(?:[NS][EW]|[NSEW])\b)?{_UNIT}")
_US_STATE_NAME = (r"(?:Alabama|Alaska|Arizona|Arkansas|California|Colorado|Connecticut|Delaware|Florida|Georgia"
                  r"|Hawaii|Idaho|Illinois|Indiana|Iowa|Kansas|Kentucky|Louisiana|Maine|Maryland|Massachusetts"
                  r"|Michigan|Minnesota|Mississippi|Missouri|Montana|Nebraska|Nevada|New Hampshire|New Jersey"
                  r"|New Mexico|New York|North Carolina|North Dakota|Ohio|Oklahoma|Oregon|Pennsylvania|Rhode Island"
                  r"|South Carolina|South Dakota|Tennessee|Texas|Utah|Vermont|Virginia|Washington|West Virginia"
                  r"|Wisconsin|Wyoming)")
# ", Springfield, IL 62704", a CSV row's ",Asheville,NC,28801", a state written out ("Maryland 20852")
_US_TOWN_STATE_ZIP = (rf"(?:{_CAP}\s{{1,3}}){{0,3}}{_CAP}(?:,\s{{0,3}}|\s{{1,3}})(?:{_US_STATE}|{_US_STATE_NAME})"
                      r"(?:,\s{0,3}|\s{1,3})\d{5}(?:-\d{4})?\b")
US_TAIL = rf"(?:,\s{{0,3}}|\s{{1,3}}){_US_TOWN_STATE_ZIP}"

_UK_TYPE = (r"(?:Street|Road|Lane|Avenue|Close|Crescent|Drive|Gardens|Place|Square|Terrace|Way|Court|Grove|Hill"
            r"|Mews|Row|Walk|Park|Rise|View|Green|Parade)")
_UK_POSTCODE = r"(?:[A-PR-UWYZ][A-HK-Y]?\d[A-Z\d]?\s?\d[ABD-HJLNP-UW-Z]{2})"
# a house number, a range of them ("14-16 Station Road") or one with a letter
_UK_NUMBER = r"\d{1,4}(?:[-–]\d{1,4})?[A-Za-z]?"
_UK_STREET = rf"\b{_UK_NUMBER},?\s{{1,3}}(?:{_CAP}\s{{1,3}}){{1,3}}{_UK_TYPE}\b"
# the town lines before the postcode, each after a comma or on a line of its own
_UK_LINE = r"(?:,[ \t]{0,3}\n?[ \t]{0,3}|[ \t]{0,3}\n[ \t]{0,3})"
UK_TAIL = rf"(?:{_UK_LINE}(?:{_CAP}[ \t]{{0,3}}){{1,3}}){{0,3}}(?:,?\s{{1,3}}|{_UK_LINE}){_UK_POSTCODE}\b"

_DE_TYPE = r"(?:straße|strasse|str\.|weg|allee|platz|gasse|damm|ufer|chaussee|steig|pfad)"
_DE_WORD_TYPE = r"(?:Straße|Strasse|Str\.|Weg|Allee|Platz|Gasse|Ring|Damm|Ufer|Chaussee)"
_DE_NAME = (rf"(?:[A-ZÄÖÜ][a-zäöüß]{{1,30}}(?:-[A-ZÄÖÜ]?[a-zäöüß]{{1,30}}){{0,4}}?(?:{_DE_TYPE}|-{_DE_WORD_TYPE})"
            rf"|(?:[A-ZÄÖÜ][\wäöüß.-]{{0,30}}\s{{1,3}}){{1,3}}{_DE_WORD_TYPE})")
_DE_STREET = rf"\b{_DE_NAME}\s{{0,3}}\d{{1,4}}(?:\s?[a-z])?(?:\s?[-/]\s?\d{{1,4}}[a-z]?)?\b"
_DE_TAIL = rf",?\s{{1,3}}(?:D-)?\d{{5}}\s{{1,3}}{TOWN}"

_FR_TYPE = (r"(?:rue|avenue|av\.|boulevard|bd|place|chemin|allée|allee|impasse|quai|route|cours|square|passage"
            r"|faubourg|rond-point)")
_FR_STREET = (rf"\b\d{{1,4}}(?:[-–]\d{{1,4}})?(?:\s?(?:bis|ter|[A-C]))?,?\s{{1,3}}{_FR_TYPE}\s{{1,3}}(?:(?:de\s{{1,3}}la|de\s{{1,3}}l'|du|des|de|d'|la|le|les)\s{{0,3}})?"
              rf"[A-ZÉÈ][\w'’-]{{0,30}}(?:\s{{1,3}}(?:de\s{{1,3}}la|de\s{{1,3}}l'|du|des|de|d'|la|le|les|et|[A-ZÉÈ][\w'’-]{{0,30}})){{0,4}}"
              r"(?![\w'’-])")
# the rule is case-blind ("12 Rue", "12 rue"), its town is not ("44000 Nantes ce soir" ends at Nantes)
_FR_TAIL = rf"(?:,?\s{{1,3}}|;)\d{{5}}(?:\s{{1,3}}|;)(?-i:{TOWN})(?:\s(?-i:Cedex)(?:\s\d{{1,2}})?)?"


# --- streets without a type word: the postcode tail is required (it is what makes them addresses) ---
_LINE_END = r"(?=\s{0,3}(?:[,.;:)\]]|\n|$|(?:USA|U\.S\.A?\.?|United States|UK|United Kingdom|Germany|Deutschland)\b))"
_US_BARE = rf"\b\d{{1,6}}[A-Z]?\s{{1,3}}(?:[NSEW]\.?\s{{1,3}})?(?:{_CAP}\s{{1,3}}){{0,3}}{_CAP}{_UNIT}"
_US_BARE_TAIL = rf"(?:,\s{{0,3}}|[ \t]{{0,3}}\n[ \t]{{0,3}}){_US_TOWN_STATE_ZIP}"
_UK_BARE = rf"\b{_UK_NUMBER},?\s{{1,3}}(?:{_CAP}\s{{1,3}}){{0,2}}{_CAP}"
_UK_BARE_TAIL = rf"(?:{_UK_LINE}(?:{_CAP}[ \t]{{0,3}}){{1,3}}){{1,3}}(?:,?\s{{1,3}}|{_UK_LINE}){_UK_POSTCODE}\b"
# a street or building line without a number, then town lines and the full postcode: "Church Lane\nLittle
# Snoring\nFakenham\nNR21 0JE" (the house name before it joins it as a building line)
_UK_NUMBERLESS = rf"\b(?:{_CAP}[ \t]{{1,3}}){{1,3}}(?:{_UK_TYPE}|Lane|Quay|{BUILDING_WORD})\b"
_UK_NUMBERLESS_TAIL = rf"(?:{_UK_LINE}(?:{_CAP}[ \t]{{0,3}}){{1,3}}){{1,3}}(?:,?[ \t]{{1,3}}|{_UK_LINE}){_UK_POSTCODE}\b"
_UK_POSTCODES = Anchor(re.compile(rf"{_UK_POSTCODE}\b"), before=160, after=0)
_DE_PREP = (r"(?:Am|Im|Zum|Zur|Beim|An\s{1,3}(?:der|den|dem)|In\s{1,3}(?:der|den|dem)|Auf\s{1,3}(?:der|den|dem)"
            r"|Unter\s{1,3}(?:den|der|dem)|Hinter\s{1,3}(?:der|den|dem)|Vor\s{1,3}(?:der|den|dem)|Alte[rs]?|Neue[rs]?)")
_DE_CAPW = r"[A-ZÄÖÜ][a-zäöüß]{1,30}(?:-[A-ZÄÖÜ][a-zäöüß]{1,30}){0,3}"
_DE_PREP_STREET = rf"\b{_DE_PREP}\s{{1,3}}(?:{_DE_CAPW}\s{{1,3}}){{0,2}}{_DE_CAPW}\s{{1,3}}\d{{1,4}}(?:\s?[a-z])?\b"
# German street names without a type word still end like one ("Jungfernstieg", "Alter Markt",
# "Kaiserring"); any capitalised word would take "Kapitel 3, 10000 Exemplare." for an address.
_DE_BARE_END = (r"(?:stieg|markt|ring|graben|berg|hof|feld|tor|kamp|wall|deich|brücke|garten|hain|höhe|tal|anger"
                r"|bogen|winkel|zeile|kai|dorf|busch|heide|wiese|acker|grund|koppel|redder|twiete|bruch|rain|steg"
                r"|park|werder|wald|weide|linden|kamp|kanal|hafen|mühle|brunnen|hang|blick|pfad|gang)")
_DE_BARE = (rf"\b(?:{_DE_CAPW}\s{{1,3}}){{0,2}}[A-ZÄÖÜ][a-zäöüß-]{{0,30}}{_DE_BARE_END}\s{{1,3}}\d{{1,4}}"
            r"(?:\s?[a-z])?")
_DE_BARE_TAIL = rf",\s{{1,3}}(?:D-)?\d{{5}}\s{{1,3}}{TOWN}{_LINE_END}"

# --- the French box abbreviations: BP (boîte postale), CS (course spéciale), TSA (tri service arrivée) ---
_FR_BOX_TAIL = rf",?\s{{1,3}}(?:[–-]\s{{1,3}})?(?:F-)?\d{{5}}\s{{1,3}}{TOWN}(?:\s{{1,3}}Cedex(?:\s\d{{1,2}})?)?"
_FR_BP = r"\b(?:B\.?\s?P\.?|CS|TSA)\s{0,3}\d{1,5}\b(?!\s?/|\s?mm|\s?%)"


def _rule(country: str, street: str, tail: str, flags: int = 0) -> Rule:
    return Rule(f"address_{country}", "POSTAL_ADDRESS", _PII, re.compile(f"{street}(?P<tail>{tail})?", flags),
                score=0.8, context=ADDRESS_CUES, needs_context=True, context_waived_by="tail")


ADDRESS_RULES: list[Rule] = [
    _rule("us", _US_STREET, US_TAIL),
    _rule("uk", _UK_STREET, UK_TAIL),
    _rule("de", _DE_STREET, _DE_TAIL),
    _rule("fr", _FR_STREET, _FR_TAIL, re.IGNORECASE),
    # a street without its type word: only with the rest of the address
    Rule("address_us_bare", "POSTAL_ADDRESS", _PII, re.compile(_US_BARE + _US_BARE_TAIL), score=0.7),
    Rule("address_uk_bare", "POSTAL_ADDRESS", _PII, re.compile(_UK_BARE + _UK_BARE_TAIL), score=0.7),
    Rule("address_de_bare", "POSTAL_ADDRESS", _PII, re.compile(_DE_BARE + _DE_BARE_TAIL), score=0.7),
    Rule("address_uk_numberless", "POSTAL_ADDRESS", _PII, re.compile(_UK_NUMBERLESS + _UK_NUMBERLESS_TAIL), score=0.7,
         anchor=_UK_POSTCODES),
    _rule("de_prep", _DE_PREP_STREET, _DE_TAIL),
    # "BP 45" needs its postcode and town, or a cue (the other boxes: address_intl.py)
    Rule("address_fr_bp", "POSTAL_ADDRESS", _PII, re.compile(f"{_FR_BP}(?P<tail>{_FR_BOX_TAIL})?"), score=0.7,
         context=ADDRESS_CUES, needs_context=True, context_waived_by="tail", hints=("bp", "b.p", "cs", "tsa")),
]
