"""The parts every country's address rule is built from, and the lines around a found address.

Shapes shared by ``address.py``, ``address_intl.py`` and ``address_jp_in_br.py``: the spaces inside
a line and the separators between lines (a comma, a line break, a dash, a CSV ``;``), a capitalised
word (Latin letters with their accents: Ł, Ś, Ž too), a town ("Frankfurt am Main", "Garching b.
München", "'s-Gravenhage"; a town never runs on past a full stop or a line break), the postcodes
of the European countries, and the words of a post-office box in each language.

:func:`extend_address` makes the lines around a finding part of it: the flat, unit, floor and
building lines before the street ("Flat 2,", "Suite 2.04,", "2nd Floor,", "Queens Court,",
"Résidence Les Tilleuls, Bât. B,", "Roppongi Hills Mori Tower 20F,") and the region and country
after the town (", Rajasthan", ", CDMX", ", Scotland", "\\nCanada").
"""

from __future__ import annotations

import re

__all__ = [
    "BOX_WORDS",
    "BUILDING_WORD",
    "CAPW",
    "EU_POSTCODE",
    "IN_STATES",
    "LINE_BREAK",
    "MX_REGION",
    "NOT_COUNTED",
    "SEP",
    "TOWN",
    "UPPER",
    "S",
    "extend_address",
]

S = r"[ \t]{1,3}"                                                          # spaces inside a line
LINE_BREAK = r"(?:[,;][ \t]{0,3}\n?[ \t]{0,3}|[ \t]{0,3}\n[ \t]{0,3})"      # a comma, a CSV ';' or a new line
SEP = rf"(?:{LINE_BREAK}|,?[ \t]{{1,3}}[–-][ \t]{{1,3}}|[ \t]{{1,3}})"       # between two parts of an address
UPPER = "A-ZÀ-ÖØ-ÞĀĂĄĆĈĊČĎĐĒĔĖĘĚĜĞĠĢĤĦĨĪĬĮİĴĶĹĻĽĿŁŃŅŇŌŎŐŒŔŖŘŚŜŞŠŢŤŦŨŪŬŮŰŲŴŶŸŹŻŽ"
CAPW = rf"[{UPPER}][\w'’.-]{{0,30}}"                                       # a capitalised word of a street name

# a town: one to three words, joined by a space or a hyphen or a particle ("am", "sur", "b."); a full
# stop ends it unless it closes an abbreviation ("St. Gallen"), so "Berlin. Gruß" stops at Berlin
_TOWN_WORD = rf"(?:'s-|[Ll]'|[Dd]')?(?:S(?:t|te|ta|an)\.[ \t]?)?(?!Cedex\b)[{UPPER}][\w'’-]{{0,30}}"
_TOWN_JOIN = r"(?:[ \t-]{1,2}(?:(?:am|an\sder|an|sur|sous|lès|les|en|la|le|de|del|di|im|in|bei|b\.|a\.|ob|upon|on)[ \t]{1,2})?)"
TOWN = rf"{_TOWN_WORD}(?:{_TOWN_JOIN}{_TOWN_WORD}){{0,2}}"

EU_POSTCODE = (r"(?:(?:D|A|AT|CH|B|BE|F|I|E|NL|L|LU|PL|S|SE|P|PT|DK|N|NO|FI|CZ|SK|HU|HR|SI)-[ \t]?)?"
               r"(?:\d{4}[ \t]?[A-Z]{2}|\d{4}-\d{3}|\d{2}-\d{3}|\d{3}[ \t]\d{2}|\d{5}|\d{4})")

# a noun that counts things before its number is no street name ("Model 3", "Kapitel 3", "Room 12")
NOT_COUNTED = (r"(?!(?:Model|Version|Release|Build|Chapter|Kapitel|Section|Page|Seite|Figure|Table|Level|Room|Stage"
               r"|Phase|Step|Part|Round|Season|Episode|Series|Volume|Vol|Issue|Item|Order|Invoice|Ticket|Sprint|Week"
               r"|Year|Day|Top|Rank|Game|Match|Track|Unit|Suite|Floor|Gate|Platform|Terminal|Box|Lot|Batch|Firefox"
               r"|Windows|Android|Python|Java|Node|Rule|Article|Artikel|Art|Paragraph|Absatz)\b)")

# the words of a post-office box (its number follows)
BOX_WORDS = (r"(?:P\.?[ \t]?O\.?[ \t]{0,3}Box|Post[ \t]{1,3}Office[ \t]{1,3}Box|POB|GPO[ \t]Box|Locked[ \t]Bag"
             r"|Postfach|Postbus|Postboks|Bo[iî]te[ \t]{1,3}postale|Case[ \t]postale|Casella[ \t]{1,3}postale"
             r"|Caixa[ \t]Postal|Apartado(?:[ \t]{1,3}(?:de[ \t]{1,3}correos|postal))?|Apdo\.|Skrytka[ \t]pocztowa)")

# --- the lines before the street: a unit, a floor, a building; each ends in a separator ---
_UNIT_WORD = (r"(?i:Flat|Unit|Apt\.?|Appt\.?|Appart\.?|Apartment|Suite|Ste\.?|Appartement|Apartamento|Wohnung|Whg\.|Top|Door"
              r"|Dept\.?|Depto\.?|Interior|Shop|Level|Office|Room|Rm\.?"
              r"|Bldg\.?|Building|Bâtiment|Bât\.|Escalier|Esc\.|Entrée|Block|Blk|Villa|Penthouse|Lot)")
# a unit's number has a digit or is one letter ("Flat B"): "Studio Bianchi," is a firm, not a unit
_UNIT = (rf"(?:\b{_UNIT_WORD}[ \t]{{1,2}}(?:[A-Z]?\d[\w./-]{{0,6}}|[A-Z])(?![\w])"
         r"|#[ \t]?\d{1,4}[A-Za-z]?(?:-\d{1,4})?)")
_FLOOR = (r"\b(?:\d{1,3}(?:st|nd|rd|th|e|er|º|ª)|Ground|First|Second|Third|Fourth|Fifth|Top|Upper|Lower|Basement)"
          r"[ \t](?:Floor|floor|étage)(?:[ \t]Flat)?")
BUILDING_WORD = (r"(?:House|Court|Cottage|Tower|Towers|Building|Centre|Center|Plaza|Mansions|Lodge|Farm|Estate|Park"
                  r"|Apartments|Residency|Heights|Chambers|Hall|Manor|Barn|Mill|Rectory|Vicarage|Villas|Wharf"
                  r"|Complex|Arcade|Exchange|Works|Yard|Buildings|Point|Gate|Hills|Maltings|Studios|Lofts|Residences)")
_NOT_BUILDING_NAME = r"(?!(?:To|At|In|On|Our|New|Ship|Send|Deliver|Delivery|Address|Mail|Office|Visit|Attn|Dear)\b)"
_BUILDING = (rf"(?:\b(?:{_NOT_BUILDING_NAME}[{UPPER}][\w'’&.-]{{0,30}}[ \t]){{0,3}}{BUILDING_WORD}"
             r"(?:[ \t](?:\d{1,3}F|[A-Z]|\d{1,2}))?"
             rf"|\b(?:Résidence|Lotissement|Immeuble|Domaine|Hameau|Lieu-dit|ZA|ZI|ZAC|ZAE|Parc)[ \t]"
             rf"(?:(?:du|de\sla|des|de|d'|l'|les|le|la)[ \t]?)?[{UPPER}][\w'’-]{{0,30}}(?:[ \t][{UPPER}][\w'’-]{{0,30}}){{0,2}})")
_PART_END = r"(?:,[ \t]{0,3}\n?[ \t]{0,3}|[ \t]{0,3}\n[ \t]{0,3}|[ \t]{0,2}/[ \t]{0,2}|[ \t]{1,2}[–-][ \t]{1,2})"
_LINES_BEFORE = re.compile(
    rf"(?:(?:{_UNIT}|{_FLOOR}|{_BUILDING}){_PART_END}){{1,3}}\Z"
    # "3/19 Ocean Parade": the unit number and a slash glued to the house number
    r"|\b(?:Unit[ \t])?\d{1,4}[A-Za-z]?/\Z"
    # the finding began at the unit's number ("Unit 5, Riverside Estate", "Suite 2.04, Tower House")
    rf"|\b{_UNIT_WORD}[ \t]{{1,2}}(?:\d{{1,4}}[.])?\Z")

# --- the lines after the town: a region, a country ---
IN_STATES = (r"(?:Andhra Pradesh|Arunachal Pradesh|Assam|Bihar|Chhattisgarh|Goa|Gujarat|Haryana|Himachal Pradesh"
             r"|Jharkhand|Karnataka|Kerala|Madhya Pradesh|Maharashtra|Manipur|Meghalaya|Mizoram|Nagaland|Odisha"
             r"|Punjab|Rajasthan|Sikkim|Tamil Nadu|Telangana|Tripura|Uttar Pradesh|Uttarakhand|West Bengal|Delhi"
             r"|Jammu and Kashmir|Ladakh|Puducherry|Chandigarh)")
MX_REGION = (r"(?:CDMX|Ciudad de México|Jal\.|Jalisco|N\.[ \t]?L\.|Nuevo León|Yuc\.|Yucatán|Q\.[ \t]?Roo\.|Gto\.|Pue\.|Ver\."
             r"|Chih\.|Son\.|B\.[ \t]?C\.|Edomex|Méx\.)")
_REGION = rf"(?:{IN_STATES}|{MX_REGION})"
_COUNTRY = (r"(?:USA|U\.S\.A\.|United States|UK|United Kingdom|England|Scotland|Wales|Northern Ireland|Canada"
            r"|Australia|New Zealand|Aotearoa|Ireland|Éire|Deutschland|Germany|Österreich|Austria|Schweiz|Suisse"
            r"|Switzerland|Svizzera|France|España|Spain|Italia|Italy|Nederland|The Netherlands|Netherlands|Belgique"
            r"|België|Belgium|Belgien|Luxembourg|Polska|Poland|Sverige|Sweden|Danmark|Denmark|Norge|Norway|Suomi"
            r"|Finland|Portugal|Japan|India|Brazil|Brasil|México|Mexico|Singapore)")
_LINE_AFTER = re.compile(
    rf"(?:,[ \t]{{0,3}}\n?[ \t]{{0,3}}|[ \t]{{0,3}}\n[ \t]{{0,3}}|[ \t]{{1,3}})(?:{_REGION}(?![\w])|(?i:{_COUNTRY})\b)")


def extend_address(text: str, start: int, end: int) -> tuple[int, int]:
    """An address span with the unit, floor and building lines before it and the region and country
    lines after it."""
    before = _LINES_BEFORE.search(text, max(0, start - 100), start)  # leftmost: the longest extension
    if before is not None and before.end() == start:
        start = before.start()
    for _ in range(2):  # a region, then a country ("Monterrey, N.L., México")
        after = _LINE_AFTER.match(text, end, min(len(text), end + 40))
        if after is None:
            break
        end = after.end()
    return start, end
