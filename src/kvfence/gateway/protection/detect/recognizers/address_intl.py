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

- New Zealand (``, Wellington 6011``, a rural delivery ``RD 1``), Singapore (``#05-67``,
  ``Singapore 560123``), Mexico (``Col. Cuauhtémoc``, ``C.P. 06500``, a state after the town), the
  Nordic countries (``Karl Johans gate 22, 0159 Oslo``, ``2200 København N``), a Dutch street without
  its type word when the Dutch postcode follows (``Damrak 1, 1012 LG Amsterdam``);
- post-office boxes of every country, in one rule with every country's tail (``PO Box``,
  ``Postfach`` with or without its number, ``Postbus``, ``Postboks``, ``Box`` before a Swedish
  postcode, ``Boîte postale``, ``Case postale``, ``CP`` before a Canadian tail, ``Casella
  postale``, ``Apartado``, ``Caixa Postal``, ``Skrytka pocztowa``, rural routes ``RR 2 Box 152``,
  military ``PSC 1234, Box 5678, APO AE 09204``).

The postcode and town are required: a street name and a number alone ("Via Roma 10 is closed")
are left to the cue-word rules of ``address.py``. The unit, floor and building lines before the
street and the region and country lines after the town are made part of the span by
``address_parts.extend_address``.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.findings import Category
from kvfence.gateway.protection.detect.recognizers.address import UK_TAIL, US_TAIL
from kvfence.gateway.protection.detect.recognizers.address_jp_in_br import BR_TAIL, JP_IN_BR_ADDRESS_RULES
from kvfence.gateway.protection.detect.recognizers.address_parts import (
    BOX_WORDS,
    BUILDING_WORD,
    CAPW,
    EU_POSTCODE,
    LINE_BREAK,
    MX_REGION,
    NOT_COUNTED,
    SEP,
    TOWN,
    UPPER,
    S,
)
from kvfence.gateway.protection.detect.scanner import Anchor, Rule

__all__ = ["INTL_ADDRESS_RULES"]

_PII = Category.PII
_LOW = r"(?:de|del|de la|de las|de los|dels|della|delle|dello|degli|dei|di|da|do|dos|das|du|des|la|le|les|l'|d'|e|y|i|van|der|den)"
_NAME = rf"(?:{_LOW}{S}|{_LOW}(?=[{UPPER}]))?{CAPW}(?:{S}(?:{_LOW}{S}|{_LOW}(?=[{UPPER}]))?{CAPW}){{0,5}}"

# house number with its parts: 45, 12a, 101/3/12, 5/A, 123-II, 10-12, s/n, 3º B, 2º Esq., bus 3, Stiege 2,
# /Top 5, m. 12, lok. 7, lgh 1102, 2 tr, pral. 1ª, hs, 3hoog
_NUMBER_PART = (r"(?:(?:bus|bte|boîte|Stiege|Stg\.|Tür|Top|Esc\.|esc\.|Escalera|piso|Piso|puerta|Pta\.|int\.|interno"
                r"|scala|sc\.|Apt\.?|apt\.?|app\.?|Appartement|Wohnung|Whg\.|m\.|lok\.|lgh|Lgh|pral\.)[ \t]?[\w-]{1,4}\.?"
                r"|\d{1,2}[ºª°][ \t]?(?:[A-Z]|Izq|izq|Dcha|dcha|Esq|Dto|Dt)?\.?|\d{1,2}[ \t]tr\b|[A-Z]\b)")
_NUMBER = (r"(?:\d{1,5}[a-zA-Z]?(?:[ \t]?[/-][ \t]?(?:\d{1,4}[a-zA-Z]?|[A-Z]\b|I{1,3}\b|IV\b|hs\b)){0,3}"
           r"(?:[ \t]?(?:bis|ter|hs|huis|bg|\d-?hoog))?|s/n|S/N)"
           rf"(?:(?:,?[ \t]{{1,3}}|[ \t]?/[ \t]?){_NUMBER_PART}){{0,3}}")

# the street word first, capitalised or not ("Via Roma", "via Roma", "VIA ROMA"): the list as it is, in lower
# and in upper case (literals; a case-blind group or a [Vv] class would make the rule try every word three
# times slower)
_PREFIX_WORDS = ("Calle|Avda\\.|Avenida|Av\\.|Plaza|Pza\\.|Paseo|Passeig|Camino|Carrer|Carretera|Ronda|Rambla|Travesía"
                 "|Travessera|Avinguda|Glorieta|Calzada|Calz\\.|Blvd\\.|Bulevar|Prolongación|Via|V\\.le|Viale|Piazza|P\\.za"
                 "|Piazzale|Corso|C\\.so|Largo|Vicolo|Strada|Lungomare|Lungarno|Borgo|Contrada|Rua|R\\.|Travessa|Praça"
                 "|Estrada|Alameda|Rue|Avenue|Boulevard|Bd|Place|Chemin|Allée|Impasse|Quai|Route|Chaussée|Square"
                 "|Passage|Rond-point|Laan")
_PREFIX_TYPE = (f"(?:{_PREFIX_WORDS}|{_PREFIX_WORDS.lower()}|{_PREFIX_WORDS.upper()}"
                r"|C/|C\.|P[ºo]\.?|ul\.|ulica|al\.|aleja|pl\.|plac|os\.|osiedle)")
_SUFFIX = (r"(?:straße|strasse|str\.|gasse|weg|allee|platz|ring|damm|ufer|steig|markt|graben|zeile|gürtel|kai|lände"
           r"|straat|laan|gracht|plein|kade|singel|dijk|dreef|steeg|pad|baan|wal|hof|park|markt|plantsoen"
           r"|gatan|vägen|gränd|torget|backen|stigen|leden|gade|vej|veien|gata|vägen)")
# an adjective before a compound street ("Landstraßer Hauptstraße", "Alte Jakobstraße")
_ADJECTIVE = rf"(?:[{UPPER}][\w'’-]{{1,30}}er|Alte|Große|Grosse|Neue|Lange|Hohe|Obere|Untere|Kleine|Breite){S}"
_SUFFIX_STREET = (rf"(?:(?:{_ADJECTIVE})?[{UPPER}][\wäöüßåéè-]{{0,30}}"
                  rf"(?:{_SUFFIX}|-(?:Straße|Strasse|Str\.|Weg|Allee|Platz|Gasse|Ring|Damm|Ufer))"
                  rf"|(?:[{UPPER}][\wäöüß.-]{{1,30}}{S}){{1,2}}"
                  r"(?:Straße|Strasse|Str\.|Gasse|Weg|Allee|Platz|Ring|Damm|Ufer|Gürtel|Markt|Laan|Straat|Plein"
                  r"|gate|gata|gade|vej|vei|veien|allé|plass|torg))")

# postcode + town: one free part may come between ("2. Etage links,"); a CSV row's ";" or "," between
# (with no space after it: "20121, Giulia" is a postcode and the next field)
_EU_TAIL = (rf"{SEP}(?:[^\n,;]{{1,40}}[,;]?{SEP})?{EU_POSTCODE}(?:[ \t]{{1,3}}|[,;](?=[^ \t])){TOWN}"
            r"(?:[ \t]{1,2}(?:\([A-Z][\w .]{1,20}\)|[A-ZÆØÅ]{1,2}\b|Cedex(?:[ \t]\d{1,2})?|\d{1,2}\b))?")

_EN_TYPE = (r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl|Way|Terrace|Tce"
            r"|Parade|Pde|Highway|Hwy|Crescent|Cres|Close|Grove|Square|Sq|Row|Quay|Parkway|Pkwy|Circle|Cir|Mews|Walk"
            r"|Gardens|Hill|Park|Green|View|Rise|Esplanade|Esp|Wharf|Mall|Loop|Arcade|Promenade|Approach|Strand)")
_EN_STREET = (rf"\b\d{{1,6}}[A-Za-z]?(?:[/-]\d{{1,5}}[A-Za-z]?)?,?{S}(?:(?:{CAPW}|\d{{1,3}}(?:st|nd|rd|th)){S}){{1,4}}"
              rf"{_EN_TYPE}\b\.?(?:[ \t]{{1,3}}(?:N|S|E|W|NE|NW|SE|SW|North|South|East|West|Ouest|Est|Nord|Sud)\b)?")
_FR_CA_STREET = (rf"\b\d{{1,6}}[A-Za-z]?,?{S}(?:Rue|Avenue|Boulevard|Boul\.|Chemin|Place|Côte|Montée|Rang|rue|avenue"
                 rf"|boulevard|boul\.|chemin|place|côte|montée|rang){S}{_NAME}")
_CA_PROV = (r"(?:ON|QC|BC|AB|MB|SK|NS|NB|NL|PE|YT|NT|NU|Ontario|Quebec|Québec|Alberta|Manitoba|British Columbia"
            r"|Nova Scotia|New Brunswick|Saskatchewan)")
_CA_POSTCODE = r"[ABCEGHJ-NPRSTVXY]\d[ABCEGHJ-NPRSTV-Z][ \t]?\d[ABCEGHJ-NPRSTV-Z]\d"
_CA_STATION = rf"(?:{SEP}(?:Station|Stn\.?|STN|Succursale|succursale|Succ\.|succ\.){S}[\w-]{{1,20}})?"
_CA_TAIL = (rf"{_CA_STATION}{SEP}{TOWN},?[ \t]{{1,3}}(?:{_CA_PROV}|\({_CA_PROV}\))(?:,?[ \t]{{1,3}}|[ \t]{{0,3}}\n[ \t]{{0,3}})"
            rf"{_CA_POSTCODE}\b")
_AU_STATE = r"(?:NSW|VIC|Vic|QLD|Qld|WA|SA|TAS|Tas|ACT|NT)"
_AU_TAIL = rf"{SEP}{TOWN}(?:[ \t]{{1,3}}{TOWN})?,?[ \t]{{1,3}}{_AU_STATE}[ \t]{{1,3}}\d{{4}}\b"
# the routing key has its letters; the four characters after it are taken as any letters and digits
_EIRCODE = r"(?:[AC-FHKNPRTV-Y]\d{2}|D6W)[ \t]?[0-9A-Z]{4}"
_IE_TAIL = (rf"(?:{SEP}{TOWN}){{0,2}}(?:{SEP}(?:Co\.|County){S}{CAPW})?(?:{SEP}{_EIRCODE}\b|"
            rf"{SEP}Dublin[ \t]\d{{1,2}}\b(?:{SEP}{_EIRCODE}\b)?)")
# New Zealand: suburb and rural delivery parts, then the town and a four-digit postcode
_NZ_TAIL = rf"(?:{LINE_BREAK}(?:RD[ \t]\d{{1,2}}|{TOWN})){{0,2}}{LINE_BREAK}{TOWN}[ \t]{{1,3}}\d{{4}}\b"
# an Irish street or building line without a number, with its Eircode: "Main Street, Dingle, Co. Kerry, V92
# FD89", "The Maltings, Bray, Co. Wicklow, A98 C5D6" (a house named "The ..." is a building line of its own)
_EN_NUMBERLESS = rf"\b(?:(?:{CAPW}{S}){{1,3}}(?:{_EN_TYPE}|{BUILDING_WORD})|The{S}(?:{CAPW}{S}){{0,2}}{CAPW})\b"

# Mexico: the street and number, the colonia and other parts, the C.P. and town, then the state
_MX_STREET = rf"(?:(?:{_PREFIX_TYPE}{S})?{_NAME}|Calle[ \t]\d{{1,3}}(?:[ \t][A-Z])?)"
_MX_NUMBER = r"(?:(?:No\.|Núm\.|#)[ \t]?)?\d{1,5}[A-Z]?(?:[ \t](?:Int\.|int\.|Interior|Depto\.)[ \t]?[\w-]{1,5})?"
_MX_PARTS = rf"(?:{LINE_BREAK}(?:(?:Col\.|Colonia|Fracc\.|Piso|Int\.|Depto\.)[ \t]?)?(?:{_NAME}|\d{{1,2}})){{0,3}}"
_MX_ADDRESS = (rf"\b{_MX_STREET},?{S}{_MX_NUMBER}{_MX_PARTS}{LINE_BREAK}(?:C\.[ \t]?P\.[ \t]?|CP[ \t]?)?\d{{5}}"
               rf"(?:,?[ \t]{{1,3}}){TOWN}(?:,[ \t]{{0,3}}{MX_REGION})?")
_MX_MARK = re.compile(rf"Col\.|Colonia|C\.[ \t]?P\.|CDMX|M[eé]xico|{MX_REGION}")

# Singapore: block and street, unit "#05-67", building, "Singapore 560123"
_SG_ADDRESS = (rf"\b(?:(?:Blk|Block)[ \t])?\d{{1,5}}[A-Z]?{S}(?:(?:{CAPW}|\d{{1,3}}){S}){{0,5}}{CAPW}(?:{S}\d{{1,3}}[A-Z]?)?"
               rf"(?:,?{S}#\d{{1,3}}-\d{{1,5}}[A-Z]?)?(?:(?:{S}|{LINE_BREAK})(?:{CAPW}{S}){{0,3}}{CAPW})?"
               rf"(?:{S}|{LINE_BREAK})Singapore[ \t]{{1,3}}\d{{6}}\b")

# a Dutch street without its type word, with a Dutch postcode ("Damrak 1, 1012 LG Amsterdam"), or a
# Belgian one with its box ("Meir 50 bus 3, 2000 Antwerpen"); its first word is no counted noun ("Model 3,
# 2024 EV Range": Dutch streets are often plain words, "Dam 1", "Markt 12", so a dictionary would not do)
_BARE_STREET = rf"\b{NOT_COUNTED}[{UPPER}][\w'’-]{{2,30}}(?:{S}[{UPPER}][\w'’-]{{2,30}})?{S}\d{{1,5}}[a-zA-Z]?(?:-(?:I{{1,3}}|IV|hs|\d{{1,4}}))?"
# (the letters are no era, union or acronym: "Kapitel 3, 2000 AD Verlag", "Version 2, 2023 EU Report"), and the
# town ends its line or sentence
_NL_LETTERS = r"(?!SA|SD|SS|AD|BC|EU|UK|US|AI|IT|HR|PR|QA|VS|OK|TV|PC|ID)[A-Z]{2}"
_NL_BE_BARE = (rf"{_BARE_STREET}(?:{SEP}\d{{4}}[ \t]?{_NL_LETTERS}|[ \t]{{1,3}}(?:bus|bte)[ \t]?\w{{1,4}}{SEP}\d{{4}})"
               rf"(?:[ \t]{{1,3}}|,){TOWN}"
               r"(?=[ \t]{0,3}(?:[,.;:)\]]|\n|$|Nederland|The Netherlands|Netherlands|België|Belgique|Belgium))")



# post-office boxes: the box words alone, or with the tail of any country
_BOX_NUMBER = r"\d{1,6}(?:[ \t]\d{2,4}){0,2}(?:-\d{1,4})?\b"
_BOX_EU_TAIL = rf"(?:{S}[{UPPER}][\w-]{{1,20}})?{SEP}{EU_POSTCODE}[ \t]{{1,3}}{TOWN}(?:[ \t]{{1,3}}(?:Cedex(?:[ \t]\d{{1,2}})?|\d{{1,2}}\b))?"
_BOX_TAILS = rf"(?:{US_TAIL}|{UK_TAIL}|{_CA_TAIL}|{_AU_TAIL}|{_IE_TAIL}|{_NZ_TAIL}|{BR_TAIL}|{_BOX_EU_TAIL})"
_PO_BOX = (rf"\b(?i:{BOX_WORDS})[ \t]{{0,3}}(?:No\.?[ \t]{{0,3}}|Nr\.?[ \t]{{0,3}}|n°[ \t]{{0,3}}|#[ \t]{{0,3}})?{_BOX_NUMBER}"
           rf"(?:{_BOX_TAILS})?"
           rf"|\b(?:CP|C\.P\.|Case[ \t]postale){S}\d{{1,6}}{_CA_TAIL}"                   # Canada: "CP 8888, succursale ..."
           rf"|\bBox{S}\d{{1,6}}{SEP}\d{{3}}[ \t]\d{{2}}{S}{TOWN}"                      # Sweden: "Box 7823, 103 97 Stockholm"
           rf"|\bPostfach{SEP}{EU_POSTCODE}[ \t]{{1,3}}{TOWN}"                          # Switzerland: "Postfach, 3003 Bern"
           rf"|\b(?:RR|R\.R\.|HC|Rural[ \t]Route)[ \t]?\d{{1,3}},?{S}Box[ \t]\d{{1,5}}{US_TAIL}"
           rf"|\b(?:PSC|CMR|Unit)[ \t]\d{{1,5}},?{S}Box[ \t]\d{{1,5}},?{S}(?:APO|FPO|DPO)[ \t](?:AE|AP|AA)[ \t]\d{{5}}\b")

# every form ends in a postcode of its country's shape (or a PO box number before one): the rules run
# only in windows before and after those, not over every number and capitalised word of a prompt
# (each branch starts with the character it needs and looks behind after it: sre then skips ahead to the
# next digit or capital instead of trying a lookbehind at every character, 2.5-4x faster)
_NUMBERS = Anchor(re.compile(r"\d(?<!\w\d)(?:\d{3,4}|\d-\d{3}|\d{2} \d{2}|\d{3}-\d{3}|\d{3} ?[A-Z]{2})(?![\w-])"
                             r"|[A-Z](?<!\w[A-Z])(?:\d[A-Z] ?\d[A-Z]\d\b|(?<=[AC-FHKNPRTV-Y])\d{2} ?[0-9A-Z]{4}\b"
                             r"|(?<=D)6W ?[0-9A-Z]{4}\b|(?<=D)ublin \d)"), before=200, after=60)
# the rules of one country's mark run only around it
_SINGAPORE = Anchor(re.compile(r"Singapore[ \t]{1,3}\d{6}\b"), before=160, after=20)
_MEXICO = Anchor(_MX_MARK, before=200, after=120)
_DUTCH_POSTCODE = Anchor(re.compile(r"\d{4}[ \t]?[A-Z]{2}\b|b(?:us|te)[ \t]?\w"), before=80, after=60)

INTL_ADDRESS_RULES: list[Rule] = [
    Rule("address_eu_prefix_street", "POSTAL_ADDRESS", _PII,
         re.compile(rf"\b{_PREFIX_TYPE}{S}{_NAME},?{S}(?:n[º°o]\.?[ \t]?|nr\.?[ \t]?)?{_NUMBER}{_EU_TAIL}"), score=0.8,
         anchor=_NUMBERS),
    Rule("address_eu_suffix_street", "POSTAL_ADDRESS", _PII,
         re.compile(rf"\b{_SUFFIX_STREET}[ \t]{{1,3}}{_NUMBER}{_EU_TAIL}"), score=0.8,
         anchor=_NUMBERS),
    Rule("address_nl_be_bare", "POSTAL_ADDRESS", _PII, re.compile(_NL_BE_BARE), score=0.7, anchor=_DUTCH_POSTCODE),
    # one pass over the English street lines for the four countries' tails
    Rule("address_ca_au_ie_nz", "POSTAL_ADDRESS", _PII,
         re.compile(rf"(?:{_EN_STREET}|{_FR_CA_STREET})(?:,?[ \t]{{1,3}}(?:Apt|Suite|Unit|Ste|#)\.?[ \t]?[\w-]{{1,6}})?"
                    rf"(?:{_CA_TAIL}|{_AU_TAIL}|{_IE_TAIL}|{_NZ_TAIL})|{_EN_NUMBERLESS}{_IE_TAIL}"),
         score=0.8, anchor=_NUMBERS),
    Rule("address_mx", "POSTAL_ADDRESS", _PII, re.compile(_MX_ADDRESS), score=0.8, anchor=_MEXICO,
         validate=lambda value: _MX_MARK.search(value) is not None),
    Rule("address_sg", "POSTAL_ADDRESS", _PII, re.compile(_SG_ADDRESS), score=0.8, anchor=_SINGAPORE),
    Rule("address_po_box", "POSTAL_ADDRESS", _PII, re.compile(_PO_BOX), score=0.8,
         # a rural route and a military box say "Box" too
         hints=("box", "postfach", "postbus", "postboks", "postale", "postal", "apartado", "apdo", "pob", "bag",
                "pocztowa", "cp ", "c.p.")),
    *JP_IN_BR_ADDRESS_RULES,  # Japan, India, Brazil (address_jp_in_br.py)
]
