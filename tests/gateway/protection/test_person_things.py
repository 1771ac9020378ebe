"""PERSON, issue #19 third round: a finding whose words say it names a thing is dropped, whichever
rule made it (``person_things.py``); service words and vocatives are no names (``words_not_names.txt``);
a closing without its comma is no cue. Each case next to people that must still be found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvfence.gateway.protection.detect.recognizers.gazetteer import gazetteer
from tests.gateway.protection.person_spans import values

REPO = Path(__file__).resolve().parents[3]


# (what makes it a thing, text): each made a PERSON finding before
THINGS = [
    ("dedication word first", "Fort William is the start of the hike; Fort Worth hosts the conference."),
    ("dedication word first", "Hurricane Katrina and Storm Ciara are in the claims model."),
    ("dedication word first", "Der Flughafen Franz Josef Strauß ist gut angebunden."),
    ("dedication word first", "The Turing Award ceremony is in San Francisco this June."),
    ("dedication word before", "L'aeroporto Leonardo da Vinci è chiuso per nebbia."),
    ("dedication word before", "El estadio Santiago Bernabéu acoge la final."),
    ("dedication word before", "Le syndrome de Gilles de la Tourette est diagnostiqué tôt."),
    ("dedication word before", "Lo stadio Giuseppe Meazza è esaurito."),
    ("thing noun after", "Laura Ashley wallpaper is back in the catalogue."),
    ("thing noun after", "A bottle of Robert Mondavi cabernet and two Paul Masson rosés."),
    ("thing noun after", "Tommy John surgery kept the pitcher out for a season."),
    ("thing noun after", "Marie Curie nurses provide end-of-life care."),
    ("eponym after a possessive", "Lou Gehrig's disease is another name for ALS."),
    ("eponym after a possessive", "Bell's palsy usually resolves within six months."),
    ("possessive and a capitalised word", "Halley's Comet will next be visible in 2061."),
    ("possessive and a capitalised word", "The ferry to Martha's Vineyard leaves from Woods Hole."),
    ("possessive and a capitalised word", "Add Jacob's Creek to the bar order."),
    ("a product after 'is a'", "Our kettle is a Russell Hobbs; the toaster is a Morphy Richards."),
    ("a possessive brand", "Nando's and Pizza Express both offer a student discount."),
    ("firm words later in the sentence", "Elizabeth Arden and Helena Rubinstein both launched serums this autumn."),
    ("service word", "Helfen Sie uns, den Service zu verbessern."),
    ("vocative after a greeting", "Hallo Welt ist das erste Beispiel. Hola Mundo también."),
    ("vocative after a greeting", "Buongiorno Signori, vi inviamo il verbale. Sehr geehrte Damen und Herren,"),
    ("department in a list", "Attendees: Finance, Legal, Procurement, IT"),
    ("placeholder in a list", "Attendees: TBD"),
    ("holiday after a role word", "Father Christmas visits the office party at four."),
    ("a closing without its comma", "Best Buy and Best Western both changed their loyalty programmes."),
    ("a closing without its comma", "Yours Truly, the IT helpdesk"),
    ("a surname that is a word, after a cue", "Attention Span is the working title of the podcast."),
    ("known firm", "Latham Watkins hired three partners from Sullivan Cromwell in London."),
    ("a firm's word before", "Les laboratoires Pierre Fabre recrutent à Toulouse."),
    ("an article first", "Cordialement,\nLes Achats"),
    ("a thing elsewhere in the text",
     "// Port of the Douglas Peucker simplification; Ramer Douglas Peucker in the literature."),
    ("a possessive brand", "Levi's 501 jeans are back in stock."),
    ("the sentence says what it is", "Ben Nevis is the highest mountain in Britain."),
    ("the sentence says what it is", "Stella Artois and Peroni are the two beers on tap."),
    ("the sentence says what it is", "Bloody Mary and Tom Collins are on the cocktail menu."),
    ("a food or a dog after it", "Earl Grey tea and Jack Russell terriers."),
    ("a product after it", "Herman Miller furniture for the new office; Chris Craft boats are expensive."),
    ("a product after the whole run", "We restored Frank Lloyd Wright furniture last year."),
    ("a firm's 'its' after a verb of saying", "Orange said its margin fell."),
    ("a firm's plan after a verb of saying", "Columbus said it would expand the airport."),
    ("a possessive brand", "Macy's said holiday sales fell."),
    ("a prize after 'won an'", "She won an Oscar and two Emmys."),
    ("a medical eponym", "Ewing sarcoma of the femur; Barrett's oesophagus on endoscopy."),
    ("a holiday", "Columbus Day parade, then Guy Fawkes Night fireworks."),
    ("a dedication word first", "Royal Mail and Parcelforce both missed the slot."),
]


@pytest.mark.parametrize(("why", "text"), THINGS, ids=[f"{w}:{t[:24]}" for w, t in THINGS])
def test_things_named_after_people_are_no_person(why: str, text: str) -> None:
    assert values(text) == [], why


# the same shapes with a person in them: still found
PEOPLE = [
    ("I fixed Priya's laptop; Priya Raman said fine.", ["Priya", "Priya Raman"]),
    ("Ask Laura Ashford whether the wallpaper arrived.", ["Laura Ashford"]),
    ("Best regards,\nJohn Baker\nProcurement", ["John Baker"]),
    ("Best,\nOluwadamilare Okafor", ["Oluwadamilare Okafor"]),
    ("Jorge Bueno firmó el contrato.", ["Jorge Bueno"]),
    ("Dear Sam, thanks for the notes.", ["Sam"]),
    ("Hi Tesfaye,\nthe report is late.", ["Tesfaye"]),
    ("Bitte frag Katrin Vogel, sie kennt den Flughafen.", ["Katrin Vogel"]),
    ("The station manager, Kwame Mensah, confirmed the delay.", ["Kwame Mensah"]),
    ("Martha's laptop is at reception; Martha Kowalski will collect it.", ["Martha", "Martha Kowalski"]),
    ("Cordialement,\nCamille Fabre", ["Camille Fabre"]),
    ("Dr. Douglas reviewed the Douglas Peucker simplification.", ["Douglas"]),
    ("Kwame Mensah is the new owner of the restaurant.", ["Kwame Mensah"]),
    ("Kwame Mensah is the new restaurant manager.", ["Kwame Mensah"]),
    ("Tendai Moyo and Ana Ruiz are the two reviewers.", ["Tendai Moyo", "Ana Ruiz"]),
    ("hey @dawit can you check? @selamawit says it started after the upgrade", ["dawit", "selamawit"]),
    ("Priya said it would be fine.", ["Priya"]),
    ("Mrs. Okafor's fracture healed; Priya Raman night shift starts at 8.", ["Okafor", "Priya Raman"]),
]


@pytest.mark.parametrize(("text", "expected"), PEOPLE)
def test_people_next_to_those_words_are_still_found(text: str, expected: list[str]) -> None:
    assert values(text) == expected


@pytest.mark.parametrize("word", ["danke", "helfen", "gracias", "posso", "bueno", "grazie", "bedankt", "merci"])
def test_service_words_are_no_given_names(word: str) -> None:
    g = gazetteer()
    assert not g.is_given(word)
    assert g.is_ordinary(word)
    assert values(f"{word}, {word.capitalize()}! thanks {word}") == []


def test_the_third_dev_set_of_hard_negatives_has_no_finding() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from names_quality import read_markup

    rows = read_markup(REPO / "tests/data/names_hard_negatives_dev.txt")
    negatives = [row["text"] for row in rows if row["negative"]]
    assert len(negatives) >= 150
    found = {text: values(text) for text in negatives}
    assert {text: v for text, v in found.items() if v} == {}


# issue #19 recall, third round: names the lists lack, vouched for by an ask verb, a role label or a
# verb of writing; Arabic particles; initials; lower-case verbs in chat
FOUND = [
    ("an ask verb", "Vraag Wubbo even naar de factuur.", ["Wubbo"]),
    ("an ask verb", "Demande à Tjalling si le devis est prêt.", ["Tjalling"]),
    ("a thanks word of another language", "Merci Ngozika pour le retour.", ["Ngozika"]),
    ("a role label", "Assigned to Rangi Kereama, due Friday.", ["Rangi Kereama"]),
    ("a role label", "Reviewer: Bo-ra Jeong", ["Bo-ra Jeong"]),
    ("initials after a sign-off", "Signed: J. P. Oyelaran-Smith", ["J. P. Oyelaran-Smith"]),
    ("an Arabic particle", "Witness: Fatima al-Zahra Mansour", ["Fatima al-Zahra Mansour"]),
    ("a sentence start before a verb of writing", "Sifiso Ndlovu wrote back this morning.", ["Sifiso Ndlovu"]),
    ("a lower-case Italian 'se' is no SE", "Chiedi a Mariapia se il contratto è firmato.", ["Mariapia"]),
    ("a lower-case name before a past verb", "lgtm, wojtek wanted to review too", ["wojtek"]),
    ("a given name the lists lacked", "thanks raj, merged", ["raj"]),
    ("names that are words are no headline", "Overleg met Joost van Leeuwen en Sanne Bakker op donderdag.",
     ["Joost van Leeuwen", "Sanne Bakker"]),
    ("names that are words are no headline", "Besprechung mit Jörg Hoffmann und Katrin Vogel am Donnerstag.",
     ["Jörg Hoffmann", "Katrin Vogel"]),
    ("a department word is no headline word", "Guten Tag, ich bin Franziska Weber aus dem Einkauf.",
     ["Franziska Weber"]),
    ("a listed hyphenated given name at a sentence start", "Jean-Marc et Solène sont en congé.",
     ["Jean-Marc", "Solène"]),
    ("a French role label", "Locataire : Faustine Berthier", ["Faustine Berthier"]),
]


@pytest.mark.parametrize(("why", "text", "expected"), FOUND, ids=[f"{w}:{t[:20]}" for w, t, _ in FOUND])
def test_names_the_lists_lack_are_found_with_a_cue(why: str, text: str, expected: list[str]) -> None:
    assert values(text) == expected, why


NOT_FOUND = [
    "Merci Beaucoup pour tout. Danke Schön! Grazie Mille!",
    "Frag Wikipedia, ask ChatGPT, chiedi a Google.",
    "Ask Questions early. Tell Everyone. Ping Datadog.",
    "Assigned to Platform Team. Reviewer: Security Guild. Owner: Data Engineering.",
    "Ask Jeeves was a search engine.",
    "Attention Deficit Disorder; Witness Statement; Author Guidelines.",
    "the al-Aqsa mosque",
    "Crystal Palace beat Aston Villa on Saturday.",
    "Taft-Hartley notice filed.",
    "Summer Grant Program Opens Across Europe",
]


@pytest.mark.parametrize("text", NOT_FOUND)
def test_the_same_cues_before_words_are_no_names(text: str) -> None:
    assert values(text) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("cc jmüller on the thread pls", ["jmüller"]),
    ("@kfischer can you look? ask amehta.", ["kfischer", "amehta"]),
    ("owner: tgarcia", ["tgarcia"]),
])
def test_an_initial_and_a_surname_after_a_cue_is_a_handle(text: str, expected: list[str]) -> None:
    assert values(text) == expected


@pytest.mark.parametrize("text", [
    "cc admin, @devops, ping jenkins, @sbrown", "email jmuller@example.com", "see @pytest.fixture",
    "kfischer wrote the cron job",  # no cue: a word as far as the rules know
])
def test_handles_without_a_known_surname_or_a_cue_are_none(text: str) -> None:
    assert values(text) == []
