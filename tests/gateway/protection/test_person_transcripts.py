"""PERSON, issue #19 (N12): names in chat transcripts, e-mail closings and lists. The other speakers of
a transcript once one of them is a person, French spacing before a speaker's colon, a dash after a speaker, "w/", a signature
on the "-- " line, short closings ("Ta,", "BR,", "Thanks all,") and "Morning"; a "Surname, Given" pair is
no pair when its first word is no surname or its line is a list; chat interjections ("lol", "omg", "yes")
and "dm" before a name that is no word, "nisha here", closings with "!" or a blank line before the name. Each
next to the texts that stay as they were."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.gateway.protection.person_spans import values

REPO = Path(__file__).resolve().parents[3]

# (text, the names): each was missed, in whole or in part, before
TRANSCRIPTS = [
    ("rosa: is the vpn down?\nbill: yes, since 9", ["rosa", "bill"]),  # "bill" a word, a speaker here
    ("Kwesi: pushed\nMark: reviewing now", ["Kwesi", "Mark"]),
    ("[09:01] Ingrid: morning\n[09:02] Dawn: hi!", ["Ingrid", "Dawn"]),
    ("Priyanka: merged. Grace: thanks, deploying", ["Priyanka", "Grace"]),
]
CLOSINGS = [
    ("Yanis : je suis en retard, commencez sans moi", ["Yanis"]),
    ("Mateus — in 10", ["Mateus"]),
    ("Bilal - can you take this one?", ["Bilal"]),
    ("lunch w/ Ahmed and then the review", ["Ahmed"]),
    ("See you there.\n\n-- Haruki", ["Haruki"]),
    ("Can you send the PO?\n\nTa,\nGemma", ["Gemma"]),
    ("That's all clear now.\n\nBR,\nKsenia", ["Ksenia"]),
    ("Great session today.\n\nThanks all,\nNkechi", ["Nkechi"]),
    ("Morning Tendai, can you send the figures?", ["Tendai"]),
]


@pytest.mark.parametrize(("text", "names"), TRANSCRIPTS + CLOSINGS, ids=[t[:30] for t, _ in TRANSCRIPTS + CLOSINGS])
def test_a_speaker_of_a_transcript_or_a_signed_name_is_found(text: str, names: list[str]) -> None:
    assert values(text) == names


# chat interjections and "dm" before a name that is no word, a writer naming themself, closings with "!" or a
# blank line before the name, "Rgds" and "Thx", "Assigned:", and given names the lists lacked
CHAT = [
    ("omg sunil that's amazing", ["sunil"]),
    ("haha yes deepak, agreed", ["deepak"]),
    ("dm'd fatou about it", ["fatou"]),
    ("np olu, anytime", ["olu"]),
    ("hey guys, nisha here, i'll be late", ["nisha"]),
    ("Good morning all, Ritu here.", ["Ritu"]),
    ("Many thanks,\n\nHiroko", ["Hiroko"]),
    ("Thank you!\nAriana", ["Ariana"]),
    ("Rgds,\nFaisal", ["Faisal"]),
    ("Thx,\nPriyanka", ["Priyanka"]),
    ("Assigned: Priya", ["Priya"]),
    ("Owner: Sizwe | Due: 12/12", ["Sizwe"]),
    ("Vusi mentioned the client wants a discount", ["Vusi"]),
    ("let me know if Thembi needs a copy", ["Thembi"]),
    ("Nkosana said he would call", ["Nkosana"]),
    ("is tomorrow ok for you nikhil?", ["nikhil"]),
    ("thanks a lot ruslan!", ["ruslan"]),
]


@pytest.mark.parametrize(("text", "names"), CHAT, ids=[t[:30] for t, _ in CHAT])
def test_a_name_after_a_chat_interjection_or_a_closing_is_found(text: str, names: list[str]) -> None:
    assert values(text) == names


# a "Surname, Given" pair read where there are two people (before: one wrong span over both)
LISTS = [
    ("To: Arash, Leyla\nSubject: offsite dates", ["Arash", "Leyla"]),
    ("Participants : Chloé, Mamadou, Thi Lan", ["Chloé", "Mamadou", "Thi Lan"]),
    ("Panel: Ravi, Chen, Ingrid", ["Ravi", "Chen", "Ingrid"]),
    ("Chair: Priya | Scribe: Ingrid", ["Priya", "Ingrid"]),  # a "|" ends a list label's items
]
PAIRS = [
    ("To: Smith, Will", ["Smith, Will"]),
    ("Raman, Priya", ["Raman, Priya"]),
    ("Attendees: Okafor, Chidi; Raman, Priya", ["Okafor, Chidi", "Raman, Priya"]),
]


@pytest.mark.parametrize(("text", "names"), LISTS + PAIRS, ids=[t[:30] for t, _ in LISTS + PAIRS])
def test_a_surname_given_pair_needs_a_surname_first_and_no_list(text: str, names: list[str]) -> None:
    assert values(text) == names


# no new name: labels and words at a line start, one speaker alone, a label with its value
NONE = [
    "will: do it after lunch\nmark: as done",  # no speaker of the text is a person
    "Note: the build is red\nStatus: open",
    "Subject: invoice\nDate: Mon, 2 Nov 2026",
    "Paris: 3 orders\nBerlin: 5 orders\nKofi confirmed",
    "Morning standup moved to 10.",
    "Sunday morning: release freeze",
    "Ta, that's great!",
    "the bill came to 40 quid w/ tip",
    "lol Docker is down again",
    "omg Kafka again",
    "ok Mercedes is parked outside",
    "yes Paris was great",
    "ok will do",
    "yes mark it as done",
    "hey guys, support here",
    "dm me when free",
    "Thanks,\n\nThe Team",
    "Thank you!\nQ3 numbers below",
    "Thanks!\n\nMay",
    "Assigned: Platform Team",
    "Paris - london flights are cheap",
    "Jordan - overview of the region",
    "Summary - the build is red",
    "Apollo - load tests pending",
    "Hugo - the static site generator",
    "Mercedes - new model out",
    "is it on staging, kafka?",
    "are you sure, will?",
    "ok for you, paris?",
    "have you seen the build yet, jenkins?",
]


@pytest.mark.parametrize("text", NONE, ids=[t[:30] for t in NONE])
def test_labels_words_and_lone_lines_stay_none(text: str) -> None:
    assert values(text) in ([], ["Kofi"])


def test_a_label_before_a_name_keeps_its_span() -> None:
    assert values("Signé : Dominique Lebrun, gérant") == ["Dominique Lebrun"]


def test_the_second_chat_dev_set_keeps_its_recall_and_its_hard_negatives() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from names_quality import read_markup

    rows = read_markup(REPO / "tests/data/names_chat2_dev.txt")
    labelled = [(row["text"], row["text"][s:e]) for row in rows for s, e, kind in row["spans"] if kind == "PERSON"]
    assert len(labelled) >= 200
    hits = sum(1 for text, name in labelled if any(name in v or v in name for v in values(text)))
    assert hits / len(labelled) >= 0.92
    assert not [row["text"] for row in rows if row["negative"] and values(row["text"])]
