"""PERSON, issue #19 fourth round: "Given Surname" firms that no list holds are known by their context
(a ticker, their shares, their results, a statement that says "it", a spokesperson for them, "At X,
we"), in the last check every finding passes (``person_things.py``); French and Italian sign-offs;
a form's plain "Nom :" / "Nome:" field next to a given-name or surname field. Each case next to
people that must still be found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvfence.gateway.protection.detect.findings import resolve_overlaps
from kvfence.gateway.protection.detect.recognizers.person import find_persons
from tests.gateway.protection.person_spans import values

REPO = Path(__file__).resolve().parents[3]


# (what says it is a firm, text): each made a PERSON finding before; the names are on no list
FIRMS = [
    ("a statement that says 'it'", "Hartwell Brenner said in a statement that it would cut 300 jobs."),
    ("a statement that says 'it'", "Colby Strand said in a filing on Monday that its lenders had agreed."),
    ("a ticker", "Fenwick Ashby (NYSE: FWA) said on Tuesday it had agreed to buy a rival."),
    ("a spokesperson for it", "A spokesperson for Bennett Rowe said the firm had not been contacted."),
    ("a spokesperson for it", "Un porte-parole de Fabien Marchal a refusé de commenter."),
    ("'At X, we'", "At Winslow Carter, we believe in building lasting partnerships."),
    ("a firm word after it", "Michel Dumas Conseil a annoncé dans un communiqué la fermeture de son site."),
    ("a French statement", "Gérald Morvan a annoncé dans un communiqué la vente de sa filiale."),
    ("a restaurant word before", "Nous avons réservé une table à la brasserie Georges."),
]

# already none before (other words of the sentence said so), kept so that the new context rule keeps them
FIRMS_BEFORE = [
    ("a ticker", "Orwell Danby (Nasdaq: ORDB) will report after the close."),
    ("its shares", "Garrison Lowe shares fell after the company warned on margins."),
    ("its shares", "Shares of Calloway Pruitt rose 4% after the company raised its outlook."),
    ("its results", "Marcus Delaney's quarterly revenue beat estimates, the retailer said."),
    ("its dividend", "Ellison Marsh announced a dividend of 40 cents per share."),
]


@pytest.mark.parametrize(("why", "text"), FIRMS + FIRMS_BEFORE, ids=[f"{w}: {t[:30]}" for w, t in FIRMS + FIRMS_BEFORE])
def test_a_firm_in_its_context_is_no_person(why: str, text: str) -> None:
    assert values(text) == [], why


# people who said something, were quoted or were met at a place keep their finding
PEOPLE = [
    ("Anna Keller said she would call back after lunch.", ["Anna Keller"]),
    ("Tobias Reinholt said in a statement that he would resign.", ["Tobias Reinholt"]),
    ("Anna Keller said it would rain, so we stayed in.", ["Anna Keller"]),
    ("At the meeting, Priya Raman said we should wait.", ["Priya Raman"]),
    ("A spokesperson for the firm, Laura Bianchi, declined to comment.", ["Laura Bianchi"]),
    ("Marcus Delaney's report is on the shared drive.", ["Marcus Delaney"]),
]


@pytest.mark.parametrize(("text", "want"), PEOPLE)
def test_people_who_said_something_are_still_found(text: str, want: list[str]) -> None:
    assert values(text) == want


# French and Italian sign-offs vouch for the name on the next line; forms' plain name fields
FOUND = [
    ("a French sign-off", "Chère Albane,\nmerci, on se voit samedi.\nBises,\nMargaux", ["Albane", "Margaux"]),
    ("a French sign-off", "Merci pour tout.\nBonne journée,\nCapucine", ["Capucine"]),
    ("an Italian sign-off", "Ci vediamo lunedì.\nUn saluto,\nGaia", ["Gaia"]),
    ("an Italian sign-off", "Grazie del messaggio.\nUn abbraccio,\nVittoria", ["Vittoria"]),
    ("an Italian sign-off", "A domani.\nA presto,\nLudovica", ["Ludovica"]),
    ("a form's plain name field", "Nom : Besnard\nPrénom : Anaïs\nVille : Rennes", ["Besnard", "Anaïs"]),
    ("a form's plain name field", "Nome: Serena\nCognome: D'Angelo\nCittà: Torino", ["Serena", "D'Angelo"]),
    ("a title after an elided article", "Appuntamento con l'avv. Benedetti martedì alle 10.", ["Benedetti"]),
    ("a title after an elided article", "Ho parlato con l'Ing. Moretti ieri.", ["Moretti"]),
    ("a chat verb of meeting", "ciao, hai sentito davide? non risponde", ["davide"]),
    ("a chat verb of meeting", "salut, t'as vu mathilde ce matin ?", ["mathilde"]),
    ("thanks with 'mille'", "grazie mille simone, sei un grande", ["simone"]),
]


@pytest.mark.parametrize(("why", "text", "want"), FOUND, ids=[f"{w}: {t[:24]}" for w, t, _ in FOUND])
def test_french_and_italian_cues(why: str, text: str, want: list[str]) -> None:
    assert values(text) == want, why


# no name after a closing that only names a team, and a lone field is still no form
NONE = [
    "Bonne journée,\nLe service client",
    "Un saluto,\nL'Ufficio Acquisti",
    "Nom: Florence",
    "Nome: Venezia",
    "J'ai vu Paris hier, puis Florence.",
    "ho visto Roma e Firenze",
    "vu le prix, merci",
]


@pytest.mark.parametrize("text", NONE)
def test_closings_and_lone_fields_with_no_person(text: str) -> None:
    assert values(text) == []


def test_the_fourth_dev_set() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from names_quality import read_markup

    rows = read_markup(REPO / "tests/data/names_fr_it_dev.txt")
    negatives = [row["text"] for row in rows if row["negative"]]
    assert len(negatives) >= 45
    found = {text: values(text) for text in negatives}
    assert {text: v for text, v in found.items() if v} == {}
    positives = [row for row in rows if not row["negative"]]
    labelled = sum(len(row["spans"]) for row in positives)
    hit = 0
    for row in positives:
        got = [(f.start, f.end) for f in resolve_overlaps(find_persons(row["text"]))]
        hit += sum(any(min(e, b) - max(s, a) >= (e - s) / 2 for a, b in got) for s, e, _ in row["spans"])
    assert labelled >= 80 and hit / labelled >= 0.95
