"""Spanish, Catalan and Portuguese places and titles around names (issue #19, N10): a street word
capitalised first or after an elided article, a stadium, school, bridge, gate or feast word before a
name, "Ville" alone, and the titles "D." (Don, Dom, Dona) and "Dña."."""

from __future__ import annotations

import pytest

from tests.gateway.protection.person_spans import values

THINGS = [
    "Ens trobem a Plaça Ramon Llull a les cinc.",
    "La botiga és a l'Avinguda Pau Casals, al costat del banc.",
    "Moramos na Praça Duque de Caxias desde 2010.",
    "La Avenida Rafael Cabrera está cerrada por la cabalgata.",
    "Jogamos no Estádio Mário Filho no domingo.",
    "Estudia a l'Institut Joan Fuster de Sueca.",
    "Passamos pela ponte Hercílio Luz ao entardecer.",
    "Cruzamos el Puente Fernando Reig a pie.",
    "Quedamos en la Puerta Isabel II a las siete.",
    "La Semana Santa de Málaga es preciosa.",
    "Per la Diada de Sant Esteve dinem a casa.",
    "Volamos a Santiago de Cuba el martes.",
    "Rendez-vous à l'Hôtel de Ville de Lyon à 10 h.",
    "Prénom;Nom;Ville\nCamille;Roux;Rennes",
]


@pytest.mark.parametrize("text", THINGS)
def test_places_and_feasts_named_after_people_are_no_person(text: str) -> None:
    found = values(text)
    if "Camille" in text:
        assert "Ville" not in found and "Camille" in found
    else:
        assert found == [], text


def test_people_beside_such_places_are_still_found() -> None:
    found = values("Hola Ville, soy Marta Ibáñez: la reunión es en la Plaça Ramon Llull con Ville Virtanen.")
    assert "Marta Ibáñez" in found and "Ville Virtanen" in found
    assert not any("Ramon" in v for v in found)


@pytest.mark.parametrize(("text", "name"), [
    ("D. Francisco Javier Ortega Cano, mayor de edad, comparece en su propio nombre.", "Francisco Javier Ortega Cano"),
    ("Sr. D. Emilio Barrios Luna\nGerente", "Emilio Barrios Luna"),
    ("Atendido por D. Ramiro en la ventanilla 2.", "Ramiro"),
    ("Boa tarde, D. Gertrudes, a receita está pronta.", "Gertrudes"),
])
def test_d_is_a_title_before_a_spanish_or_portuguese_name(text: str, name: str) -> None:
    assert values(text) == [name]


def test_dna_is_a_title_not_a_name() -> None:
    assert values("Saludos cordiales,\nDña. Elvira Soto Cuesta\nDirectora") == ["Elvira Soto Cuesta"]
    assert values("Firma: Dña. Remedios") == ["Remedios"]


@pytest.mark.parametrize("text", [
    "Rua Direita e Rua Nova estão em obras.",
    "Station de métro Franklin D. Roosevelt, sortie 2.",
    "Bajamos en el metro Antón Martín.",
])
def test_a_street_word_that_is_a_given_name_and_a_metro_station(text: str) -> None:
    assert values(text) == []


def test_a_city_of_two_words_keeps_its_second_word_a_given_name() -> None:
    # "São Paulo" is a city as a whole run: "Paulo" alone, or in a handle, is a person
    assert values("Vou para São Paulo na sexta-feira.") == []
    assert values("Falei com o Paulo ontem.") == ["Paulo"]
    assert values("pedido criado por paulo.mendes hoje") == ["paulo.mendes"]
