"""POSTAL_ADDRESS without a street-type word, and post-office boxes; ordinary sentences with numbers
(and the other meanings of "BP", "Box", "Postfach") are not addresses."""

from __future__ import annotations

import pytest

from kvfence.gateway.protection.detect.detector import build_detector

DETECTOR = build_detector(use_presidio=False)


def addresses(text: str) -> set[str]:
    return {text[f.start:f.end] for f in DETECTOR.scan(text) if f.entity == "POSTAL_ADDRESS"}


POSITIVES = [
    # post-office boxes, alone or with the rest of the address
    ("PO Box 123", "PO Box 123"),
    ("Send it to PO Box 123, Springfield, IL 62704", "PO Box 123, Springfield, IL 62704"),
    ("reply to P.O. Box 4567 by Friday", "P.O. Box 4567"),
    ("Mail: P. O. Box 88, Anchorage, AK 99501", "P. O. Box 88, Anchorage, AK 99501"),
    ("Post Office Box 1234", "Post Office Box 1234"),
    ("PO Box 77, Leeds LS1 4AP", "PO Box 77, Leeds LS1 4AP"),
    ("Postfach 10 02 45, 70002 Stuttgart", "Postfach 10 02 45, 70002 Stuttgart"),
    ("Postbus 123, 1000 AB Amsterdam", "Postbus 123, 1000 AB Amsterdam"),
    ("BP 45, 75002 Paris", "BP 45, 75002 Paris"),
    ("Adresse : BP 12 - 69001 Lyon Cedex", "BP 12 - 69001 Lyon Cedex"),
    ("Boîte postale 45", "Boîte postale 45"),
    ("Casella postale 12, 00100 Roma", "Casella postale 12, 00100 Roma"),
    ("Apartado de correos 123", "Apartado de correos 123"),
    # streets without a type word, with the rest of the address
    ("She lives in 12 Acacia, Springfield, IL 62704.", "12 Acacia, Springfield, IL 62704"),
    ("10 Downing, Westminster, London SW1A 2AA", "10 Downing, Westminster, London SW1A 2AA"),
    ("Unter den Linden 77, 10117 Berlin", "Unter den Linden 77, 10117 Berlin"),
    ("Büro: Jungfernstieg 7, 20354 Hamburg.", "Jungfernstieg 7, 20354 Hamburg"),
    ("Alter Markt 4, 50667 Köln", "Alter Markt 4, 50667 Köln"),
    ("Am Alten Markt 3, 14467 Potsdam", "Am Alten Markt 3, 14467 Potsdam"),
    # a German street opened by a preposition, after a cue word
    ("Anschrift: Am Alten Markt 3", "Am Alten Markt 3"),
    ("wohnhaft An der Alster 5", "An der Alster 5"),
]

NEGATIVES = [
    "BP 120/80 is normal for her age",
    "BP 45 shares rose on Monday",
    "the PO approved 123 boxes",
    "Box 3 contains 12 items",
    "Postfach voll, bitte leeren",
    "We sold 12 Apples, Boston said",
    "Kapitel 3, 10000 Exemplare verkauft.",
    "Version 3, 12345 Downloads.",
    "Room 12, 10115 visitors came",
    "Top 10 Tips, London 2012",
    "In 2024 we shipped 12345 units to Paris",
    "Am Ende 3 Punkte",
    "Im Jahr 2024 kamen 500 Gäste",
    "Chapter 12, Boston, MA",
    "he scored 3 Goals, London, and 2 in Paris",
    "Firefox 120, 10115 tests passed",
]


@pytest.mark.parametrize(("text", "value"), POSITIVES)
def test_finds_boxes_and_streets_without_a_type_word(text: str, value: str) -> None:
    assert addresses(text) == {value}


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_sentences_with_numbers_are_no_address(text: str) -> None:
    assert DETECTOR.scan(text) == []
