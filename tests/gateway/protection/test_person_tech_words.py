"""PERSON, issue #19: a few given names of the name lists are, in lower case, words of technical chat
("dev", "siem", "lan", "imo", "ide", "nano", "nim", "conan": data/ordinary_supplement.txt). Lower case
before a verb they are the word; capitalised, or with a surname, they stay names."""

from __future__ import annotations

import pytest

from tests.gateway.protection.person_spans import values

# each was taken for a name before the supplement
WORDS = [
    "dev is broken again",
    "siem is down again, alerts are queued",
    "the lan is down on floor 3",
    "imo, the fix is wrong",
    "ide is frozen again after the update",
    "nano is fine for that edit",
    "conan is slow today, the mirror times out",
    "nim is compiling the bindings",
]


@pytest.mark.parametrize("text", WORDS)
def test_a_lower_case_tech_word_before_a_verb_is_no_name(text: str) -> None:
    assert values(text) == []


PEOPLE = [
    ("Dev Patel joined the call", ["Dev Patel"]),
    ("Dev said it works on his machine", ["Dev"]),
    ("Hi Dev, can you review?", ["Dev"]),
    ("Conan O'Brien hosted the panel", ["Conan O'Brien"]),
    ("Lan Nguyen wrote the runbook", ["Lan Nguyen"]),
    ("ask Imo about the invoice", ["Imo"]),
]


@pytest.mark.parametrize(("text", "names"), PEOPLE)
def test_the_same_names_capitalised_or_with_a_surname_are_found(text: str, names: list[str]) -> None:
    assert values(text) == names
