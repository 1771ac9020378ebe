"""Names of Spanish, Catalan and Portuguese text (issue #19, N10): Catalan, Galician, Basque and
Portuguese given names, the Portuguese particle "do", sign-offs, greetings and thanks of those
languages, surname columns and fields (apellido1, cognoms, sobrenome, apelido), and lower-case chat
names before a verb of those languages."""

from __future__ import annotations

import pytest

from tests.gateway.protection.person_spans import values


@pytest.mark.parametrize(("text", "names"), [
    ("De: Llorenç Batlle\nPer a: Queralt Sunyer\nAssumpte: vacances", ["Llorenç Batlle", "Queralt Sunyer"]),
    ("Bon dia Ferran, ja tens l'acta?", ["Ferran"]),
    ("Assistents: Guillem Roca, Meritxell Puig, Jaume Vila", ["Guillem Roca", "Meritxell Puig", "Jaume Vila"]),
    ("La reunió amb Bernat Coll és dijous.", ["Bernat Coll"]),
    ("Xosé Lois Barreiro e Iria Varela chegaron onte.", ["Xosé Lois Barreiro", "Iria Varela"]),
])
def test_catalan_galician_and_basque_given_names(text: str, names: list[str]) -> None:
    assert values(text) == names


@pytest.mark.parametrize(("text", "names"), [
    ("O laudo de Rosana do Amaral chegou.", ["Rosana do Amaral"]),
    ("Assinado: José do Patrocínio Neto", ["José do Patrocínio Neto"]),
])
def test_the_portuguese_particle_do_joins_a_name(text: str, names: list[str]) -> None:
    assert values(text) == names


@pytest.mark.parametrize("text", ["Did Anna do Math homework?", "When does Tom do Yoga?"])
def test_english_do_between_a_name_and_a_word_is_no_particle(text: str) -> None:
    assert all(" do " not in v for v in values(text))


@pytest.mark.parametrize(("text", "names"), [
    ("Beijinhos,\nLuana", ["Luana"]),
    ("Una abraçada,\nRoser", ["Roser"]),
    ("moltes gràcies Pere!", ["Pere"]),
])
def test_sign_offs_and_thanks_of_portuguese_and_catalan(text: str, names: list[str]) -> None:
    assert values(text) == names


@pytest.mark.parametrize(("text", "names"), [
    ("id;nombre;apellido1;apellido2\n9;Lidia;Quintana;Barroso", ["Lidia", "Quintana", "Barroso"]),
    ("nom;cognoms;municipi\nPol;Ferrer Bas;Reus", ["Pol", "Ferrer Bas"]),
    ("nome;sobrenome;cidade\nMaiara;Bezerra;Natal", ["Maiara", "Bezerra"]),
    ("Sobrenome: Bezerra", ["Bezerra"]),
])
def test_surname_columns_and_fields_of_spanish_catalan_and_portuguese(text: str, names: list[str]) -> None:
    assert values(text) == names


def test_lower_case_chat_names_before_a_verb_of_those_languages() -> None:
    assert values("vale, y marisol tiene las llaves") == ["marisol"]
    assert values("ok, jaime ya lo sabe") == ["jaime"]
    assert values("vc viu a camila hoje?") == ["camila"]
    assert values("El vestido rosa está agotado.") == []
    assert values("la camisa clara está limpia") == []
