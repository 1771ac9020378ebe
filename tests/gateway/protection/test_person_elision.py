"""A name right after an elided "d'" or "l'" (French, Catalan, Italian) is a name of its own, and a
surname's "d'" joins a run after a given name (issue #19, N10): "le dossier d'Amélie", "M. Louis
d'Aubigné", "l'Arnau"; the word before the elision still says what follows ("rue d'Alésia")."""

from __future__ import annotations

import pytest

from tests.gateway.protection.person_spans import values


@pytest.mark.parametrize(("text", "names"), [
    ("Le rapport d'Ophélie est arrivé ce matin.", ["Ophélie"]),
    ("La voiture d'Anthony Girard est garée devant.", ["Anthony Girard"]),
    ("Mme Hortense d'Argenson a signé le bail.", ["Hortense d'Argenson"]),
    ("El despatx d'Eulàlia és al fons del passadís.", ["Eulàlia"]),
    ("Vine amb l'Arnau i la Laia.", ["Arnau", "Laia"]),
    ("C'est le choix d'Aurélien et de Maëlle.", ["Aurélien", "Maëlle"]),
    ("Ho detto a Marco d'Alessandro di chiamare.", ["Marco d'Alessandro"]),
])
def test_a_name_after_an_elided_article(text: str, names: list[str]) -> None:
    assert values(text) == names


@pytest.mark.parametrize("text", [
    "On skie à Val d'Isère en février.",
    "Le magasin est rue d'Alésia, au coin.",
    "On dîne à l'Olivier ce soir.",
    "La Côte d'Ivoire a gagné.",
])
def test_places_after_an_elided_article_stay_places(text: str) -> None:
    assert values(text) == []
