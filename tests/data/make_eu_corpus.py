"""Generate tests/data/pii_eu.jsonl: labelled texts for the European formats and the entities added
after the first corpus (EU phone formats, German Steuer-ID, French NIR, dates of birth, postal
addresses), with look-alikes that must not be flagged (plain dates, order / invoice numbers,
versions, private IPs, toll-free and fictional numbers, street-like phrases).

Written by the author of the rules it measures: these are training-set figures. Values are random
(seeded) and valid by construction (check digits computed, numbers in real number ranges):

    .venv/bin/python tests/data/make_eu_corpus.py
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

R = random.Random(20261201)
OUT = Path(__file__).with_name("pii_eu.jsonl")


def digits(n: int) -> str:
    return "".join(R.choice("0123456789") for _ in range(n))


# -- phones ----------------------------------------------------------------------------------------
def de_phone() -> str:
    area, rest = R.choice([("30", 7), ("30", 8), ("89", 8), ("40", 8), ("221", 7), ("69", 8), ("151", 8),
                           ("160", 7), ("171", 7)])
    number = str(R.randint(2, 9)) + digits(rest - 1)
    return R.choice([f"0049 {area} {number}", f"+49 (0){area} {number}", f"0{area}/{number}", f"0{area} {number}",
                     f"+49 {area} {number}"])


def fr_phone() -> str:
    first = R.choice("1234567")
    pairs = [digits(2) for _ in range(4)]
    if first == "7":  # French mobiles 07 are allocated from 073 to 078
        pairs[0] = f"{R.randint(3, 8)}{R.randint(0, 9)}"
    sep = R.choice([" ", ".", " "])
    return R.choice([f"0{first}{sep}" + sep.join(pairs), f"+33 {first} " + " ".join(pairs),
                     f"0033 {first} " + " ".join(pairs)])


def uk_phone() -> str:
    return R.choice([f"07700 900{digits(3)}", f"07{R.choice('45789')}{digits(2)} {R.randint(1, 9)}{digits(5)}",
                     f"020 7{digits(3)} {digits(4)}", f"+44 20 7{digits(3)} {digits(4)}",
                     f"+44 7{R.choice('45789')}{digits(2)} {R.randint(1, 9)}{digits(5)}"])


# -- national IDs ------------------------------------------------------------------------------------
def steuer_id() -> str:
    while True:
        ten = [R.randint(1, 9)] + [R.randint(0, 9) for _ in range(9)]
        counts = sorted((ten.count(d) for d in set(ten)), reverse=True)
        if counts[0] in (2, 3) and (len(counts) == 1 or counts[1] == 1):
            break
    product = 10
    for d in ten:
        total = (d + product) % 10 or 10
        product = (total * 2) % 11
    check = (11 - product) % 10
    value = "".join(map(str, ten)) + str(check)
    return R.choice([value, f"{value[:2]} {value[2:5]} {value[5:8]} {value[8:]}"])


def nir() -> str:
    sex, year, month = R.choice("12"), f"{R.randint(40, 99):02d}", f"{R.randint(1, 12):02d}"
    dept = R.choice(["75", "69", "13", "33", "2A", "2B", "59", "31"])
    commune, order = f"{R.randint(1, 999):03d}", f"{R.randint(1, 999):03d}"
    body = sex + year + month + {"2A": "19", "2B": "18"}.get(dept, dept) + commune + order
    key = 97 - int(body) % 97
    return f"{sex} {year} {month} {dept} {commune} {order} {key:02d}"


# -- dates of birth ----------------------------------------------------------------------------------
MONTHS_EN = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
             "November", "December"]
MONTHS_DE = ["Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober",
             "November", "Dezember"]
MONTHS_FR = ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
             "novembre", "décembre"]


def dob() -> str:
    y, m, d = R.randint(1935, 2012), R.randint(1, 12), R.randint(1, 28)
    return R.choice([f"{d:02d}.{m:02d}.{y}", f"{y}-{m:02d}-{d:02d}", f"{m}/{d}/{y}", f"{d:02d}/{m:02d}/{y}",
                     f"{MONTHS_EN[m - 1]} {d}, {y}", f"{d} {MONTHS_EN[m - 1]} {y}"])


def dob_de() -> str:
    y, m, d = R.randint(1935, 2012), R.randint(1, 12), R.randint(1, 28)
    return R.choice([f"{d:02d}.{m:02d}.{y}", f"{d}. {MONTHS_DE[m - 1]} {y}"])


def dob_fr() -> str:
    y, m, d = R.randint(1935, 2012), R.randint(1, 12), R.randint(1, 28)
    return R.choice([f"{d:02d}/{m:02d}/{y}", f"{d} {MONTHS_FR[m - 1]} {y}"])


# -- addresses -----------------------------------------------------------------------------------------
US_STREETS = ["Maple", "Oak", "Pine", "Cedar", "Elm", "Washington", "Lake", "Hill", "Sunset", "Park"]
US_TYPES = ["Street", "Avenue", "Road", "Drive", "Lane", "Blvd", "St", "Ave"]
US_CITIES = [("Springfield", "IL"), ("Austin", "TX"), ("Portland", "OR"), ("Denver", "CO"), ("Boston", "MA")]
UK_STREETS = ["Baker", "Church", "Station", "Victoria", "Mill", "High", "Queen's"]
UK_TYPES = ["Street", "Road", "Lane", "Close", "Gardens", "Crescent"]
UK_TOWNS = [("London", "NW1 6XE"), ("Leeds", "LS1 4AP"), ("Bristol", "BS1 5TR"), ("Manchester", "M1 1AE")]
DE_STREETS = ["Haupt", "Bahnhof", "Schiller", "Goethe", "Linden", "Berg", "Kirch"]
DE_TYPES = ["straße", "weg", "allee", "platz", "gasse"]
DE_TOWNS = [("10115", "Berlin"), ("80331", "München"), ("50667", "Köln"), ("20095", "Hamburg")]
FR_TYPES = ["rue", "avenue", "boulevard", "place", "chemin", "allée"]
FR_NAMES = ["de la Paix", "Victor Hugo", "des Lilas", "du Général Leclerc", "Jean Jaurès", "de la République"]
FR_TOWNS = [("75002", "Paris"), ("69003", "Lyon"), ("13001", "Marseille"), ("33000", "Bordeaux")]


def us_address() -> str:
    city, state = R.choice(US_CITIES)
    return f"{R.randint(1, 9999)} {R.choice(US_STREETS)} {R.choice(US_TYPES)}, {city}, {state} {digits(5)}"


def uk_address() -> str:
    town, postcode = R.choice(UK_TOWNS)
    return f"{R.randint(1, 250)} {R.choice(UK_STREETS)} {R.choice(UK_TYPES)}, {town} {postcode}"


def de_address() -> str:
    plz, town = R.choice(DE_TOWNS)
    number = f"{R.randint(1, 120)}{R.choice(['', '', 'a', 'b'])}"
    return f"{R.choice(DE_STREETS)}{R.choice(DE_TYPES)} {number}, {plz} {town}"


def fr_address() -> str:
    plz, town = R.choice(FR_TOWNS)
    return f"{R.randint(1, 180)} {R.choice(FR_TYPES)} {R.choice(FR_NAMES)}, {plz} {town}"


def de_street_only() -> str:
    return f"{R.choice(DE_STREETS)}{R.choice(DE_TYPES)} {R.randint(1, 120)}"


def us_street_only() -> str:
    return f"{R.randint(1, 9999)} {R.choice(US_STREETS)} {R.choice(US_TYPES)}"


# -- look-alikes (never labelled) -------------------------------------------------------------------------
def bait_date() -> str:
    y, m, d = R.randint(2015, 2026), R.randint(1, 12), R.randint(1, 28)
    return R.choice([f"{d:02d}.{m:02d}.{y}", f"{y}-{m:02d}-{d:02d}", f"{MONTHS_EN[m - 1]} {d}, {y}"])


BAIT = {
    "DATE": bait_date,
    "ORDER": lambda: f"0{R.randint(1, 9)}{digits(2)} {digits(6)}",
    "INVOICE": lambda: f"{R.randint(2019, 2026)}/{digits(6)}",
    "VERSION": lambda: f"{R.randint(1, 12)}.{R.randint(0, 30)}.{R.randint(0, 99)}",
    "ELEVEN": lambda: str(R.randint(1, 9)) + digits(10),
    "PRIVATE_IP": lambda: R.choice([f"10.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}",
                                    f"192.168.{R.randint(0, 255)}.{R.randint(1, 254)}",
                                    f"172.{R.randint(16, 31)}.{R.randint(0, 255)}.{R.randint(1, 254)}"]),
    "TOLLFREE": lambda: R.choice([f"+1 (800) {R.randint(200, 999)}-{digits(4)}", f"1-888-{R.randint(200, 999)}-{digits(4)}",
                                  "+1 (800) 000-0000"]),
    "FICTION": lambda: f"(212) 555-01{digits(2)}",
    "COUNT": lambda: str(R.randint(2, 400)),
}

FILLERS = {
    "DE_PHONE": (de_phone, "PHONE_NUMBER"), "FR_PHONE": (fr_phone, "PHONE_NUMBER"), "UK_PHONE": (uk_phone, "PHONE_NUMBER"),
    "STEUER_ID": (steuer_id, "DE_TAX_ID"), "NIR": (nir, "FR_NIR"),
    "DOB": (dob, "DATE_OF_BIRTH"), "DOB_DE": (dob_de, "DATE_OF_BIRTH"), "DOB_FR": (dob_fr, "DATE_OF_BIRTH"),
    "US_ADDRESS": (us_address, "POSTAL_ADDRESS"), "UK_ADDRESS": (uk_address, "POSTAL_ADDRESS"),
    "DE_ADDRESS": (de_address, "POSTAL_ADDRESS"), "FR_ADDRESS": (fr_address, "POSTAL_ADDRESS"),
    "DE_STREET": (de_street_only, "POSTAL_ADDRESS"), "US_STREET": (us_street_only, "POSTAL_ADDRESS"),
    **{name: (gen, None) for name, gen in BAIT.items()},
}

TEMPLATES = [
    ("email", "Hallo,\n\nbitte rufen Sie mich unter {DE_PHONE} zurück.\n\nGrüße"),
    ("email", "Bonjour, vous pouvez me joindre au {FR_PHONE} ou passer au {FR_ADDRESS}."),
    ("chat", "user: my mobile is {UK_PHONE}, office in {UK_ADDRESS}"),
    ("form", "Name: J. Doe\nDate of birth: {DOB}\nAddress: {US_ADDRESS}\nPhone: {UK_PHONE}"),
    ("form", "Steuer-ID: {STEUER_ID}\nGeburtsdatum: {DOB_DE}\nAnschrift: {DE_ADDRESS}"),
    ("form", "N° de sécurité sociale : {NIR}\nNée le {DOB_FR} à Lyon"),
    ("ticket", "Customer (DOB {DOB}) moved; new address: {US_STREET}. Ticket {INVOICE}."),
    ("chat", "user: ich wohne in der {DE_STREET}, Tel. {DE_PHONE}"),
    ("email", "Patient born {DOB}, seen on {DATE}; GP practice at {UK_ADDRESS}."),
    ("email", "Lieferadresse: {DE_ADDRESS}. Bestellung {ORDER} vom {DATE}."),
    ("chat", "user: reach me on {FR_PHONE} or {DE_PHONE}"),
    ("form", "Identifikationsnummer (IdNr): {STEUER_ID}"),
    # look-alikes only
    ("log", "{DATE} INFO client 10.0.0.1 -> upstream {PRIVATE_IP}: 200 in {COUNT} ms (build {VERSION})"),
    ("email", "Release {VERSION} shipped on {DATE}; invoice {INVOICE}, order {ORDER}."),
    ("ticket", "Reference {ELEVEN} was closed on {DATE} after {COUNT} days."),
    ("email", "For sales call {TOLLFREE}; the helpline is {TOLLFREE}."),
    ("chat", "user: the meeting on {DATE} moved to {DATE}, room {COUNT}"),
    ("ticket", "We fixed {COUNT} Main Street bugs in the {VERSION} release ({DATE})."),
    ("log", "{DATE} kernel: bound to {PRIVATE_IP} and 192.168.1.1, order {ORDER}"),
    ("email", "Our office moved on {DATE}. Policy number {ELEVEN}."),
    ("ticket", "Style guide: write sample numbers as {FICTION}, never real ones."),
]


def fill(template: str) -> tuple[str, list[list[object]]]:
    out: list[str] = []
    spans: list[list[object]] = []
    pos = 0
    for match in re.finditer(r"\{([A-Z_]+)\}", template):
        out.append(template[pos:match.start()])
        pos = match.end()
        generate, label = FILLERS[match.group(1)]
        value = generate()
        start = sum(len(p) for p in out)
        out.append(value)
        if label is not None:
            spans.append([start, start + len(value), label])
    out.append(template[pos:])
    return "".join(out), spans


def main() -> None:
    rows = []
    for _ in range(8):
        for kind, template in TEMPLATES:
            text, spans = fill(template)
            rows.append({"id": f"eu-{kind}-{len(rows):04d}", "kind": kind, "text": text, "spans": spans})
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


if __name__ == "__main__":
    main()
