"""PERSON, issue #19, eighth round (N11): hard negatives by class (premises, institutes, imports,
offices addressed by a title, departments, colour and ship columns, template rows, brands with a
title; then meeting rooms, ensembles, logfmt keys, labels, German genitives, works, fiction), each
next to people that must still be found, and the eighth dev set
(``tests/data/names_negatives3_dev.txt``) kept at its figure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.gateway.protection.person_spans import values

REPO = Path(__file__).resolve().parents[3]

# (class, text, the people in it): each text made a wrong PERSON finding on the tree before the round
CASES = [
    ("a premises word before or first", "Zustellung an Lager Konrad Adenauer, Rampe 3.", []),
    ("a premises word before or first", "Retrait au magasin Jean Jaurès avant 18h.", []),
    ("a premises word before or first", "Consegna al negozio Giuseppe Garibaldi entro venerdì.", []),
    ("a premises word before or first", "Recogida en el almacén Pedro Duque, muelle 2.", []),
    ("a premises word before or first", "Afhalen bij winkel Willem Alexander, Utrecht.", []),
    ("a premises word before or first", "La réunion a lieu en salle Simone Veil.", []),
    ("a premises compound first", "Ihr Paket ist im Briefzentrum Hamburg eingetroffen.", []),
    ("a premises compound first", "Ware liegt im Zentrallager Becker bereit.", []),
    ("a premises compound first", "Abholung im Logistikzentrum Frankfurt.", []),
    ("an institute, centre or cup word after", "Die Proben gehen an das Fritz Haber Institut.", []),
    ("an institute, centre or cup word after", "Die Daten kommen vom Walter Schottky Zentrum.", []),
    ("an institute, centre or cup word after", "Termin im Helmut Schmidt Zentrum.", []),
    ("an institute, centre or cup word after", "Finale der Franz Beckenbauer Pokal am Samstag.", []),
    ("a module in an import statement", "from kalman import KalmanFilter\nf = KalmanFilter(4)", []),
    ("an office addressed by its title", "Herr Ober, zwei Bier bitte!", []),
    ("an office addressed by its title", "Frau Doktor, ist das schlimm?", []),
    ("an office addressed by its title", "Vielen Dank, Herr Präsident.", []),
    ("an office addressed by its title", "Thank you, Mr. President.", []),
    ("an office addressed by its title", "Gracias, señor Alcalde.", []),
    ("an office addressed by its title, an article between", "Merci, Monsieur le Président.", []),
    ("an office addressed by its title, an article between", "Dank je, meneer de Voorzitter.", []),
    ("an office addressed by its title, an article between", "Grazie, signor Presidente.", []),
    ("a department of five languages signs", "Bonjour,\n\nle devis est validé.\n\nCordialement,\nAchats", []),
    ("a colour or ship column or key", "sku,colour,stock\nA1,Rose Gold,4\nA2,Pearl White,9", []),
    ("a colour or ship column or key", '{"vessel": "Ever Given", "port": "Rotterdam"}', []),
    ("a template row is no name", "Vorname,Nachname,Abteilung\nrequired,optional,required", []),
    ("brands with a title in them", "Mrs. Baird's bread and a Madame Tussauds ticket.", []),
    ("brands with a title in them", "Du camembert Mère Denis et du Père Magloire.", []),
    # the second batch's classes
    ("a meeting room named after a person", "Next: Isaac Newton Room", []),
    ("a meeting room named after a person", "Location: Rosalind Franklin Room, 2nd floor", []),
    ("a meeting room named after a person", '{"room": "Katherine Johnson", "floor": 3}', []),
    ("a meeting room named after a person", "Besprechung im Raum Grace Hopper.", []),
    ("an ensemble named after its leader", "Miles Davis Quintet plays tonight.", []),
    ("an ensemble named after its leader", "Tonight: Dave Brubeck Quartet.", []),
    ("an ensemble named after its leader", "Heute spielt das James Last Orchester.", []),
    ("a logfmt key that names a thing", "level=info forwarder=Walter Hansen status=booked", []),
    ("a logfmt key that names a thing", "ts=1 courier=Jonas Berger depot=Hamm", []),
    ("labels and finishes of two capitalised words", "Bill To,Ship To,Sold To\n,,", []),
    ("labels and finishes of two capitalised words", "Rose Gold and Sterling Silver finishes only.", []),
    ("a German genitive after a title", "Heute Abend: Herr der Fliegen im Kino.", []),
    ("a work the sentence names", "Dr. House is a TV show.", []),
    ("a work the sentence names", "Mrs. Miniver is a film.", []),
    ("figures of fiction with a title", "Uncle Sam and Father Ted posters.", []),
    ("a restaurant, wine or machine noun after", "Dinner at the Don Pedro restaurant.", []),
    ("a restaurant, wine or machine noun after", "Two cases of Doña Paula wines.", []),
    ("a restaurant, wine or machine noun after", "The Mr. Coffee machine is broken.", []),
    # the third batch's class
    ("a team or office named after a place or firm", "Hi Chester team,\n\nthe files are in.", []),
    ("a team or office named after a place or firm", "Thanks Georgia office! Great quarter.", []),
    ("a team or office named after a place or firm", "Hi Jackson office, the van is late.", []),
]


@pytest.mark.parametrize(("why", "text", "people"), CASES)
def test_hard_negatives_by_class(why: str, text: str, people: list[str]) -> None:
    assert sorted(values(text)) == sorted(people), why


# people next to such words: a title before a name, a surname after a greeting, a mail header's "From"
KEPT = [
    ("Filiale Nord: Ansprechpartner Jonas Weber.", "Jonas Weber"),
    ("Herr Obermeier kommt um drei.", "Obermeier"),
    ("Monsieur Le Pen a parlé.", "Le Pen"),
    ("meneer De Vries belt morgen.", "De Vries"),
    ("Gracias, señor Pérez.", "Pérez"),
    ("From Maria Keller\nSent: Monday", "Maria Keller"),
    ("Vorname,Nachname\nAnna,Keller\nrequired,required", "Anna"),
    ("Dr. Anna Keller is a TV presenter.", "Anna Keller"),
    ("Meeting with Tom Becker in room 4.", "Tom Becker"),
    ("Call Jessica Hall about the Ada Lovelace suite.", "Jessica Hall"),
    ("level=info user=Priya Raman action=login", "Priya Raman"),
    ("Hi Tom, team lead here.", "Tom"),
    ("Hi Tom team lead here", "Tom"),
]


@pytest.mark.parametrize(("text", "name"), KEPT)
def test_people_next_to_such_words_are_kept(text: str, name: str) -> None:
    assert name in values(text)


def test_the_eighth_dev_set_keeps_its_figure() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from names_quality import read_markup

    rows = read_markup(REPO / "tests/data/names_negatives3_dev.txt")
    negatives = [row["text"] for row in rows if row["negative"]]
    assert len(negatives) >= 120
    flagged = [text for text in negatives if values(text)]
    assert len(flagged) <= 8  # 23, 15 and 4 before the round's three batches; those left are in docs/names-addresses.md
