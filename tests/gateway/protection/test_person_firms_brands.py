"""PERSON, issue #19 fifth round: firms and brands named after people are matched as whole runs of
words (``data/firms.txt``, checked in ``person_things.py``, which every PERSON finding passes), titles
inside brand names ("Dr. Oetker", "Mr Kipling"), legal forms after a name-shaped run, a firm's word
first, and a name that runs on into "von <firm>". Each case next to people that must still be found."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.gateway.protection.person_spans import values

REPO = Path(__file__).resolve().parents[3]


# (class, text): each made a PERSON finding on the tree before this round
FIRMS = [
    ("law firm", "Die Kanzlei Gleiss Lutz vertritt die Bank."),
    ("law firm, firm word first", "Die Kanzlei Hengeler Mueller berät beide Seiten."),
    ("law firm, particle split", "De Brauw Blackstone Westbroek staat de koper bij."),
    ("retailer", "Jan Linders en Dirk van den Broek openen filialen."),
    ("retailer", "Ahold Delhaize verkoopt meer online."),
    ("retailer in a CSV column", "Kunde,Betrag\nHenkel,450\nHaribo,20"),
    ("fashion house", "Yves Rocher ouvre une boutique à Lille."),
    ("fashion house", "Massimo Dutti abre en Valencia."),
    ("food brand", "Fornitore,Importo\nGiovanni Rana,450"),
    ("food brand", "Two tins of Heinz, please, and a Kellogg's box."),
    ("food brand", "Pedido: una caja de Tío Pepe."),
    ("title in a brand", "We only sell Mr Kipling cakes at the counter."),
    ("title in a brand", "Ein Glas Dr. Oetker Vanillepudding, bitte."),
    ("possessive firm", "Lloyd's of London declined to renew the cyber policy."),
    ("legal form after", "Kunde,Betrag\nBeiersdorf AG,830"),
    ("group word after", "Kunde,Betrag\nOtto Group,1200"),
    ("firm + said", "Yves Rocher said sales rose four percent in France."),
    ("firm + announced", "Massimo Dutti announced two new stores in Porto."),
    ("firm + says", "Giovanni Rana says pasta prices will rise again."),
    ("a noun before von and a firm", "Danke Lukas, die Rechnung von Aldi ist da."),
]


@pytest.mark.parametrize(("why", "text"), FIRMS)
def test_firms_and_brands_named_after_people_are_no_persons(why: str, text: str) -> None:
    found = values(text)
    assert found in ([], ["Lukas"]), (why, found)


# people next to firms, and people whose surname is also a brand: the context says person
PEOPLE = [
    ("Mr. Ford said he would come to the Ferrari launch.", ["Ford"]),
    ("Herr Oetker kommt morgen ins Büro.", ["Oetker"]),
    ("Anna Ferrari runs procurement for our Milan office.", ["Anna Ferrari"]),
    ("Frau Dr. Sabine Wolff von Hengeler Mueller hat den Vertrag geprüft.", ["Sabine Wolff"]),
    ("Bitte ruf Jens Hartmann bei der Commerzbank an.", ["Jens Hartmann"]),
    ("Hi Hema, the invoice is attached.", ["Hema"]),
    ("Mevrouw Martens belt morgen terug.", ["Martens"]),
    ("Anna Keller of Baker McKenzie said the deal would close.", ["Anna Keller"]),
    ("Lucía Fernández de Garrigues revisó el contrato.", ["Lucía Fernández"]),
]


@pytest.mark.parametrize(("text", "expected"), PEOPLE)
def test_people_next_to_firms_are_still_found(text: str, expected: list[str]) -> None:
    assert values(text) == expected


def test_the_fifth_dev_set_has_no_finding_on_its_hard_negatives_and_keeps_its_recall() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from names_quality import read_markup

    rows = read_markup(REPO / "tests/data/names_firms_dev.txt")
    negatives = [row["text"] for row in rows if row["negative"]]
    assert len(negatives) >= 180
    found = {text: values(text) for text in negatives}
    assert {text: v for text, v in found.items() if v} == {}
    labelled = [(row["text"], row["text"][s:e]) for row in rows for s, e, kind in row["spans"] if kind == "PERSON"]
    assert len(labelled) >= 40
    hits = sum(1 for text, name in labelled if any(name in v or v in name for v in values(text)))
    assert hits / len(labelled) >= 0.95


def test_the_firm_check_reads_a_bounded_window_around_each_finding() -> None:
    text = "Priya Raman of Baker McKenzie met Tom Becker. " * 3000
    start = time.perf_counter()
    found = values(text)
    elapsed = time.perf_counter() - start
    assert len(found) == 6000
    assert elapsed < 8.0


# second round: a hotel or restaurant word before the run, a law of someone, a thing noun first or last
# in a title-case run, magazines and folklore figures, a thanks word and its intensifier
THINGS = [
    ("a hotel word before", "Wir wohnen im Hotel Anna Amalia in Weimar."),
    ("a law of someone", "Selon la loi de Murphy, tout ira mal."),
    ("a law of someone", "Secondo la legge di Murphy andrà male."),
    ("a thing noun first in a title-case run", "Morning Rose Tea Blend, 20 bags."),
    ("a capitalised thing noun last", "Das Boris Becker Parfüm war ein Flop."),
    ("a folklore figure", "Ook Zwarte Piet staat op de foto."),
    ("a magazine", "Ich lese Marie Claire und Elle."),
    ("a thanks word and its intensifier", "Gracias Totales es el disco del año."),
    ("a street word glued to a name", "Lieferung an Johann Sebastian Bachstraße 4 geht raus."),
    ("a street word glued to a name", "Wij zitten aan de Willem Barentszstraat 12."),
]


@pytest.mark.parametrize(("why", "text"), THINGS)
def test_things_written_like_names_are_no_persons(why: str, text: str) -> None:
    assert values(text) == [], why


@pytest.mark.parametrize(("text", "expected"), [
    ("Hi Elle, see you at 3.", ["Elle"]),
    ("Ask Anna Keller about the Hotel booking.", ["Anna Keller"]),
    ("Meine Tante Emma Blender kommt morgen.", ["Emma Blender"]),
    ("Jan Versteeg belt morgen.", ["Jan Versteeg"]),
    ("Bitte an Anna Vanderlaan weiterleiten.", ["Anna Vanderlaan"]),
])
def test_people_next_to_those_words_are_still_found(text: str, expected: list[str]) -> None:
    assert values(text) == expected
