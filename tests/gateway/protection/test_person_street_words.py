"""A person's name after a street word of a French, Italian, Spanish, Catalan, German or Dutch
address names the street, not a person (issue #19): "allée Marie Curie", "quai Jean Moulin"."""

from __future__ import annotations

import pytest

from tests.gateway.protection.person_spans import values

STREETS = [
    "Le colis est arrivé au 12 allée Marie Curie, 69100 Villeurbanne.",
    "Rendez-vous quai Jean Moulin devant la passerelle.",
    "Le local se trouve impasse Victor Hugo, au fond de la cour.",
    "Livraison chemin Paul Cézanne, portail vert.",
    "La fête a lieu square Louise Michel samedi.",
    "Il negozio è in Vicolo Giuseppe Verdi, accanto al bar.",
    "Ci vediamo in Largo Carlo Goldoni alle dieci.",
    "La oficina está en el carrer Antoni Gaudí, 14.",
    "Das Büro liegt in der Heinrich-Heine-Allee; Eingang Gasse Karl Marx.",
    "Het pakket ligt bij Laan Willem Drees en Plein Anna Frank.",
]


@pytest.mark.parametrize("text", STREETS)
def test_a_name_after_a_street_word_is_the_street(text: str) -> None:
    assert values(text) == [], text


def test_people_next_to_such_streets_are_still_found() -> None:
    found = values("Mme Claire Fontaine habite 3 allée Marie Curie; appelez Julien Moreau.")
    assert "Claire Fontaine" in found and "Julien Moreau" in found
    assert not any("Marie" in v for v in found)
