"""Postal addresses of more countries: a street line and its postcode + town, on one line or several
(Japan, India and Brazil in ``address_jp_in_br.py``, included in :data:`INTL_ADDRESS_RULES`).

``address.py`` covers US, UK, German and French streets; this module adds the forms where the
street comes with a postcode that has its own shape, which is what makes the text an address:

- Canada (``, Toronto, ON M5H 1A1``), Australia (``, Sydney NSW 2000``), Ireland (Eircode
  ``D02 X285``, ``Co. Dublin``) after an English street line ("88 Pitt Street", "12 King St W");
- Spain, Italy, Portugal, Belgium, Switzerland, Poland (a street word first: Calle, Avda., Plaza,
  Paseo, Carrer, Via, Viale, Piazza, Corso, Largo, Rua, Avenida, Travessa, Rue, Chaussée, ul., al.)
  and Germany, Austria, Switzerland, the Netherlands, Belgium, Sweden (a street word last:
  -straße, -gasse, -weg, -straat, -laan, -gracht, -plein, -kade, -gatan, -vägen ...), with the house
  number and its floor/door/box parts ("3º B", "101/3/12", "bus 3", "Stiege 2, Tür 5"), then the
  postcode of its country (``28014``, ``1060``, ``1016 DW``, ``1100-053``, ``00-590``, ``111 51``,
  with ``D-``/``A-``/``CH-``/``B-`` prefixes) and the town.

The postcode and town are required: a street name and a number alone ("Via Roma 10 is closed")
are left to the cue-word rules of ``address.py``. A flat/unit line before the street ("Flat 2,",
"Unit 7/", "Apt 5C,") and a country line after the town are made part of the span by
:func:`extend_address`.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.recognizers.address_jp_in_br import JP_IN_BR_ADDRESS_RULES
from kvfence.gateway.protection.detect.scanner import Anchor, Rule

__all__ = ["INTL_ADDRESS_RULES", "extend_address"]

_PII = Category.PII
_S = r"[ \t]{1,3}"                       # spaces inside a line
_SEP = r"(?:,[ \t]{0,3}\n?[ \t]{0,3}|[ \t]{0,3}\n[ \t]{0,3}|,?[ \t]{1,3}[–-][ \t]{1,3}|[ \t]{1,3})"  # between lines
_CAPW = r"[A-ZÀ-ÖØ-Þ][\w'’.-]{0,30}"       # a capitalised word
_LOW = r"(?:de|del|de la|de las|de los|dels|della|delle|dello|degli|dei|di|da|do|dos|das|du|des|la|le|les|l'|d'|e|y|i|van|der|den)"
_NAME = rf"(?:{_LOW}{_S}|{_LOW}(?=[A-ZÀ-Þ]))?{_CAPW}(?:{_S}(?:{_LOW}{_S}|{_LOW}(?=[A-ZÀ-Þ]))?{_CAPW}){{0,5}}"
_TOWN = r"[A-ZÀ-ÖØ-Þ][\w'’.-]{1,30}(?:[ \t-]{1,2}(?:[A-ZÀ-ÖØ-Þ][\w'’.-]{1,30}|sur|am|an|der|bei|im|in|de|la|le|del))?" \
        r"(?:[ \t-]{1,2}[A-ZÀ-ÖØ-Þ][\w'’.-]{1,30})?"

# house number with its parts: 45, 12a, 101/3/12, 10-12, 45, 3º B, 2º Esq., bus 3, Stiege 2, Tür 5
_NUMBER = (r"\d{1,5}[a-zA-Z]?(?:[ \t]?[/-][ \t]?\d{1,4}[a-zA-Z]?){0,3}(?:[ \t]?(?:bis|ter))?"
           r"(?:,?[ \t]{1,3}(?:(?:bus|bte|boîte|Stiege|Stg\.|Tür|Top|Esc\.|esc\.|piso|Piso|puerta|int\.|interno|scala|sc\."
           r"|Apt\.?|apt\.?|app\.?|Appartement|Wohnung|Whg\.)[ \t]?[\w-]{1,4}|\d{1,2}[ºª°][ \t]?(?:[A-Z]|Izq|izq|Dcha|dcha|Esq|Dto|Dt)?\.?"
           r"|[A-Z]\b)){0,3}")

_PREFIX_TYPE = (r"(?:Calle|C/|C\.|Avda\.|Avenida|Av\.|Plaza|Pza\.|Paseo|P[ºo]\.?|Camino|Carrer|Carretera|Ronda|Travesía|Glorieta"
                r"|Via|V\.le|Viale|Piazza|P\.za|Piazzale|Corso|C\.so|Largo|Vicolo|Strada|Lungomare|Borgo|Contrada"
                r"|Rua|R\.|Travessa|Praça|Estrada|Alameda|Rue|Avenue|Boulevard|Bd|Place|Chemin|Allée|Impasse|Quai|Route"
                r"|Chaussée|Square|Passage|Rond-point|ul\.|ulica|al\.|aleja|pl\.|plac|os\.|osiedle)")
_SUFFIX = (r"(?:straße|strasse|str\.|gasse|weg|allee|platz|ring|damm|ufer|steig|markt|graben|zeile|gürtel|kai|lände"
           r"|straat|laan|gracht|plein|kade|singel|dijk|dreef|steeg|pad|baan|wal|hof|park|markt|plantsoen"
           r"|gatan|vägen|gränd|torget|backen|stigen|leden|gade|vej|veien|gata|vägen)")
_SUFFIX_STREET = (rf"(?:[A-ZÄÖÜÅ][\wäöüßåéè-]{{0,30}}{_SUFFIX}|(?:[A-ZÄÖÜ][\wäöüß.-]{{1,30}}{_S}){{1,2}}"
                  r"(?:Straße|Strasse|Str\.|Gasse|Weg|Allee|Platz|Ring|Damm|Ufer|Gürtel|Markt|Laan|Straat|Weg|Plein))")

# postcode + town, by country
_EU_POSTCODE = (r"(?:(?:D|A|AT|CH|B|BE|F|I|E|NL|L|PL|S|SE|P|PT)-[ \t]?)?"
                r"(?:\d{4}[ \t]?[A-Z]{2}|\d{4}-\d{3}|\d{2}-\d{3}|\d{3}[ \t]\d{2}|\d{5}|\d{4})")
_EU_TAIL = (rf"{_SEP}(?:[^\n,]{{1,40}},?{_SEP})?{_EU_POSTCODE}[ \t]{{1,3}}{_TOWN}"
            r"(?:[ \t]{1,2}(?:\([A-Z][\w .]{1,20}\)|[A-Z]{2}\b|Cedex(?:[ \t]\d{1,2})?))?")

_EN_TYPE = (r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl|Way|Terrace|Tce"
            r"|Parade|Pde|Highway|Hwy|Crescent|Cres|Close|Grove|Square|Sq|Row|Quay|Parkway|Pkwy|Circle|Cir|Mews|Walk"
            r"|Gardens|Hill|Park|Green|View|Rise|Esplanade|Esp|Wharf)")
_EN_STREET = (rf"\b\d{{1,6}}[A-Za-z]?(?:[/-]\d{{1,5}}[A-Za-z]?)?,?{_S}(?:{_CAPW}{_S}){{1,4}}{_EN_TYPE}\b\.?"
              r"(?:[ \t]{1,3}(?:N|S|E|W|NE|NW|SE|SW|North|South|East|West|Ouest|Est|Nord|Sud)\b)?")
_FR_CA_STREET = rf"\b\d{{1,6}}[A-Za-z]?,?{_S}(?:Rue|Avenue|Boulevard|Boul\.|Chemin|Place|Côte|Montée|Rang){_S}{_NAME}"
_CA_PROV = r"(?:ON|QC|BC|AB|MB|SK|NS|NB|NL|PE|YT|NT|NU|Ontario|Quebec|Québec|Alberta|Manitoba)"
_CA_POSTCODE = r"[ABCEGHJ-NPRSTVXY]\d[ABCEGHJ-NPRSTV-Z][ \t]?\d[ABCEGHJ-NPRSTV-Z]\d"
_CA_TAIL = rf"{_SEP}{_TOWN},?[ \t]{{1,3}}{_CA_PROV}(?:,?[ \t]{{1,3}}|[ \t]{{0,3}}\n[ \t]{{0,3}}){_CA_POSTCODE}\b"
_AU_STATE = r"(?:NSW|VIC|Vic|QLD|Qld|WA|SA|TAS|Tas|ACT|NT)"
_AU_TAIL = rf"{_SEP}{_TOWN}(?:[ \t]{{1,3}}{_TOWN})?,?[ \t]{{1,3}}{_AU_STATE}[ \t]{{1,3}}\d{{4}}\b"
_EIRCODE = r"(?:[AC-FHKNPRTV-Y]\d{2}|D6W)[ \t]?[0-9AC-FHKNPRTV-Y]{4}"
_IE_TAIL = (rf"(?:{_SEP}{_TOWN}){{0,2}}(?:{_SEP}(?:Co\.|County){_S}{_CAPW})?(?:{_SEP}{_EIRCODE}\b|"
            rf"{_SEP}Dublin[ \t]\d{{1,2}}\b(?:{_SEP}{_EIRCODE}\b)?)")

# every form ends in a postcode of its country's shape (or a PO box number before one): the rules run
# only in windows before and after those, not over every number and capitalised word of a prompt
_NUMBERS = Anchor(re.compile(r"(?<!\w)(?:\d{4,5}|\d{2}-\d{3}|\d{3} \d{2}|\d{4}-\d{3}|\d{4} ?[A-Z]{2})(?![\w-])"
                             r"|\b[A-Z]\d[A-Z] ?\d[A-Z]\d\b|\b(?:[AC-FHKNPRTV-Y]\d{2}|D6W) ?[0-9AC-FHKNPRTV-Y]{4}\b"
                             r"|\bDublin \d"), before=200, after=60)

INTL_ADDRESS_RULES: list[Rule] = [
    Rule("address_eu_prefix_street", "POSTAL_ADDRESS", _PII,
         re.compile(rf"\b{_PREFIX_TYPE}{_S}{_NAME},?{_S}(?:n[º°o]\.?[ \t]?|nr\.?[ \t]?)?{_NUMBER}{_EU_TAIL}"), score=0.8,
         anchor=_NUMBERS),
    Rule("address_eu_suffix_street", "POSTAL_ADDRESS", _PII,
         re.compile(rf"\b{_SUFFIX_STREET}[ \t]{{1,3}}{_NUMBER}{_EU_TAIL}"), score=0.8,
         anchor=_NUMBERS),
    Rule("address_ca", "POSTAL_ADDRESS", _PII,
         re.compile(rf"(?:{_EN_STREET}|{_FR_CA_STREET})(?:,?[ \t]{{1,3}}(?:Apt|Suite|Unit|Ste|#)\.?[ \t]?[\w-]{{1,6}})?{_CA_TAIL}"),
         score=0.8, anchor=_NUMBERS),
    Rule("address_au", "POSTAL_ADDRESS", _PII, re.compile(rf"{_EN_STREET}{_AU_TAIL}"), score=0.8, anchor=_NUMBERS),
    Rule("address_ie", "POSTAL_ADDRESS", _PII, re.compile(rf"{_EN_STREET}{_IE_TAIL}"), score=0.8, anchor=_NUMBERS),
    Rule("address_box_ca_au_ie", "POSTAL_ADDRESS", _PII,
         re.compile(rf"\b(?:P\.?[ \t]?O\.?[ \t]?Box|GPO[ \t]Box|PO[ \t]Box|Locked[ \t]Bag|Post[ \t]Office[ \t]Box)[ \t]{{1,2}}\d{{1,6}}"
                    rf"(?:{_CA_TAIL}|{_AU_TAIL}|{_IE_TAIL})", re.IGNORECASE), score=0.85, anchor=_NUMBERS),
    *JP_IN_BR_ADDRESS_RULES,  # Japan, India, Brazil (address_jp_in_br.py)
]

_UNIT_BEFORE = re.compile(r"(?:\b(?:Flat|Unit|Apt\.?|Apartment|Suite|Ste\.?|Appartement|Apartamento|Wohnung|Shop|Level)"
                          r"[ \t]{1,2}[\w-]{1,6}[ \t]?(?:,[ \t]{0,3}\n?[ \t]{0,3}|[ \t]{0,3}\n[ \t]{0,3}|/)"
                          r"|\b(?:Unit[ \t])?\d{1,4}[A-Za-z]?/)$")
_COUNTRY_AFTER = re.compile(
    r"^(?:,[ \t]{0,3}\n?[ \t]{0,3}|[ \t]{0,3}\n[ \t]{0,3}|[ \t]{1,3})(?i:USA|U\.S\.A\.|United States|UK|United Kingdom"
    r"|Canada|Australia|Ireland|Éire|Deutschland|Germany|Österreich|Austria|Schweiz|Suisse|Switzerland|Svizzera"
    r"|France|España|Spain|Italia|Italy|Nederland|The Netherlands|Netherlands|Belgique|België|Belgium|Belgien"
    r"|Polska|Poland|Sverige|Sweden|Portugal|Japan|India|Brazil|Brasil)\b")


def extend_address(text: str, start: int, end: int) -> tuple[int, int]:
    """An address span with the flat/unit line before it and the country line after it."""
    before = _UNIT_BEFORE.search(text, max(0, start - 24), start)
    if before is not None and before.end() == start:
        start = before.start()
    after = _COUNTRY_AFTER.match(text[end:end + 40])
    if after is not None:
        end += after.end()
    return start, end
