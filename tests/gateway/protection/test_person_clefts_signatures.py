"""A cleft that says who does something, a lower-case chat name before a pronoun of French, Spanish,
Portuguese or Catalan, and a message signed with a lone given name after a greeting (issue #19, N10)."""

from __future__ import annotations

import pytest

from tests.gateway.protection.person_spans import values


@pytest.mark.parametrize(("text", "names"), [
    ("C'est Clotilde qui valide les congés.", ["Clotilde"]),
    ("Fue Remedios quien firmó el acta.", ["Remedios"]),
    ("Foi a Josiane que mandou o boleto.", ["Josiane"]),
    ("És en Jaume qui té les claus.", ["Jaume"]),
    ("It was Ingrid who found the bug.", ["Ingrid"]),
])
def test_a_cleft_names_who_does_it(text: str, names: list[str]) -> None:
    assert values(text) == names


@pytest.mark.parametrize("text", [
    "C'est Lyon qui organise le salon.",
    "C'est Noël qui approche.",
    "Es Sevilla quien gana el premio.",
    "C'est vendredi qui pose problème.",
])
def test_a_cleft_of_a_place_a_feast_or_a_day_is_no_person(text: str) -> None:
    assert values(text) == []


@pytest.mark.parametrize(("text", "names"), [
    ("soizic tu peux relire ?", ["soizic"]),
    ("killian t'as vu le mail ?", ["killian"]),
    ("marisa tú vienes mañana?", ["marisa"]),
    ("tatiana você pode ver isso?", ["tatiana"]),
    ("iñaki ¿me pasas el enlace?", ["iñaki"]),
])
def test_a_lower_case_name_before_a_pronoun_is_addressed(text: str, names: list[str]) -> None:
    assert values(text) == names


def test_a_message_signed_with_a_lone_given_name_after_a_greeting() -> None:
    assert values("Bonjour Hélène,\nje vous envoie le planning.\nLudivine") == ["Hélène", "Ludivine"]
    assert values("Hola Iván,\nya está hecho.\nNoelia\n") == ["Iván", "Noelia"]
    # no greeting, or a word on the last line: no signature
    assert values("Voici le planning.\nLudivine") == []
    assert values("Bonjour,\nvoici le devis.\nMerci") == []
    assert values("Hola Iván,\nya está hecho.\nGracias") == ["Iván"]


def test_a_safe_given_name_and_a_surname_that_is_a_word_after_a_list_label() -> None:
    assert values("Présents : Gérald Carré, Yvette Pinson") == ["Gérald Carré", "Yvette Pinson"]
    assert values("Attendees: Sydney Office, Paris Team") == []


def test_a_lower_case_name_after_a_french_verb_of_warning_someone() -> None:
    assert values("t'as prévenu ludivine pour demain ?") == ["ludivine"]
    assert values("j'ai relancé Orange hier") == []
