"""PERSON, issue #19 sixth round (N6): names in chat and e-mail text. Greetings, thanks, sign-offs and
verbs of contact in six languages before a single given name, signatures after a dash, given names that
are also words after a greeting; each case next to the word uses of the same words, which stay none."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.gateway.protection.person_spans import values

REPO = Path(__file__).resolve().parents[3]


# (text, the names): each was missed before
CUES = [
    ("I'll loop in Megan from legal.", ["Megan"]),
    ("Looping gabe in", ["gabe"]),
    ("Congrats Tasha on the promotion!!", ["Tasha"]),
    ("welcome aboard diego 🎉", ["diego"]),
    ("Sorry Ollie, I missed your call.", ["Ollie"]),
    ("Owner: Carlos (backup: Nina)", ["Carlos", "Nina"]),
    ("Per Jenna, the client wants the blue version.", ["Jenna"]),
    ("Good morning Heather, the parcel arrived.", ["Heather"]),
    ("Thanks again Summer!", ["Summer"]),
    ("Merci à Yasmine et Lucas pour l'organisation !", ["Yasmine", "Lucas"]),
    ("Rappelle Sylvie quand tu peux.", ["Sylvie"]),
    ("coucou léa ! on se voit ce soir ?", ["léa"]),
    ("frag mal jonas, der weiß das", ["jonas"]),
    ("vraag even aan joost of hij komt", ["joost"]),
]
SIGN_OFFS = [
    ("Talk soon,\nJamie", ["Jamie"]),
    ("Take care,\nPriyanka", ["Priyanka"]),
    ("À plus,\nBastien", ["Bastien"]),
    ("Bonne semaine,\nFabien", ["Fabien"]),
    ("Besos,\nCarmen", ["Carmen"]),
    ("Liefs,\nSanne", ["Sanne"]),
    ("xoxo Becca", ["Becca"]),
    ("Happy to help! - Tony", ["Tony"]),
    ("Sent from my iPhone\n\n-- \nNathan", ["Nathan"]),
]


@pytest.mark.parametrize(("text", "names"), CUES + SIGN_OFFS, ids=[t[:30] for t, _ in CUES + SIGN_OFFS])
def test_a_given_name_after_a_chat_cue_or_a_sign_off_is_found(text: str, names: list[str]) -> None:
    assert values(text) == names


# the same words as words: no name
WORDS = [
    "Welcome to the help centre.",
    "Sorry for the late reply, I was travelling.",
    "Congrats on the launch, team!",
    "According to the logs the job never started.",
    "Take care of the backups before Friday.",
    "Talk soon about the budget?",
    "I love Paris in the spring.",
    "Q3 - Victoria Park refurbishment starts in May.",
    "Results - Summer Sale 2026",
    "- Rose Garden tickets\n- Amber Room parking",
    "Good morning, everyone!",
    "Thanks again for the quick turnaround.",
    "Per the contract, payment is due in 30 days.",
    "Backup: nightly at 02:00",
]


@pytest.mark.parametrize("text", WORDS, ids=[t[:30] for t in WORDS])
def test_the_cue_words_alone_make_no_name(text: str) -> None:
    assert values(text) == []


# short forms the lists lacked, and names whose lower-case word is rare in running text
SHORT_FORMS = [
    ("shoutout to kev for fixing the printer lol", ["kev"]),
    ("grazie fede!", ["fede"]),
    ("grazie peppe, a domani", ["peppe"]),
    ("ping maria when you get a sec", ["maria"]),
    ("ask tom about it, he set up the VPN", ["tom"]),
    ("hey mike, did the invoice go out?", ["mike"]),
    ("Chris just pushed a fix, can you check?", ["Chris"]),
    ("according to gemma the room is free", ["gemma"]),
]


@pytest.mark.parametrize(("text", "names"), SHORT_FORMS, ids=[t[:30] for t, _ in SHORT_FORMS])
def test_short_forms_and_names_first_are_found(text: str, names: list[str]) -> None:
    assert values(text) == names


# their word uses, and the names kept ordinary on purpose
NOT_SHORT_FORMS = [
    "Le lycée Victor Hugo organise une journée portes ouvertes.",
    "We use Adam with a learning rate of 3e-4.",
    "ik ben er morgen niet",
    "a cup of joe and a bloody mary",
    "Hail Mary pass in the last second",
]


@pytest.mark.parametrize("text", NOT_SHORT_FORMS, ids=[t[:30] for t in NOT_SHORT_FORMS])
def test_word_uses_of_short_forms_stay_none(text: str) -> None:
    assert values(text) == []


def test_the_chat_dev_set_keeps_its_figures() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from names_quality import read_markup

    rows = read_markup(REPO / "tests/data/names_chat_dev.txt")
    labelled = [(row["text"], row["text"][s:e]) for row in rows for s, e, kind in row["spans"] if kind == "PERSON"]
    assert len(labelled) >= 150
    hits = sum(1 for text, name in labelled if any(name in v or v in name for v in values(text)))
    assert hits / len(labelled) >= 0.88


# a given name and a surname that is also a place or firm word, where the words around say it is a person
ORG_WORD_SURNAMES = [
    ("Please call Jessica Hall before 5 pm about the lease.", ["Jessica Hall"]),
    ("Meeting with Tom Bank and Sarah Church moved to Thursday.", ["Tom Bank", "Sarah Church"]),
    ("Contact: Michael Stone, Linda Park", ["Michael Stone", "Linda Park"]),
    ("Thanks,\nOliver Street", ["Oliver Street"]),
    ("We had lunch with Peter Lake and his wife.", ["Peter Lake"]),
    ("Nadia Bridge wrote back this morning.", ["Nadia Bridge"]),
]


@pytest.mark.parametrize(("text", "names"), ORG_WORD_SURNAMES, ids=[t[:30] for t, _ in ORG_WORD_SURNAMES])
def test_a_surname_that_is_a_place_word_is_a_person_in_a_person_context(text: str, names: list[str]) -> None:
    assert values(text) == names


PLACES = [
    "We walked through Victoria Park after lunch.",
    "Main Street Capital raised its dividend again.",
    "Tickets for the Royal Albert Hall are sold out.",
    "Deutsche Bank cut its forecast for the euro.",
    "Contact: Deutsche Bank, Barclays",
    "Tickets for the Albert Hall go on sale on Monday.",
    "We went to Albert Park for the race.",
    "Meet me on George Street, outside the bank.",
    "Take the exit for Hall Green.",
    "Grace Church was built in 1846.",
    "Meeting with Main Street Capital on Friday.",
    "Cordialement,\nL'équipe commerciale",
]


@pytest.mark.parametrize("text", PLACES, ids=[t[:30] for t in PLACES])
def test_places_and_firms_on_those_words_stay_none(text: str) -> None:
    assert values(text) == []


# a given name that is also a word before a verb of saying or wanting; lower-case names in chat before a
# verb, after a question's auxiliary or an @
VERBS = [
    ("Will said he'd be late, start without him.", ["Will"]),
    ("Frank wants the numbers by noon.", ["Frank"]),
    ("Rose a appelé : elle sera en retard.", ["Rose"]),
    ("Grace replied that the quote is fine.", ["Grace"]),
    ("can tunde review this before lunch?", ["tunde"]),
    ("did priya send the deck yet", ["priya"]),
    ("brb, sam needs me", ["sam"]),
    ("jake and tyler are driving, mia takes the train", ["jake", "mia"]),
    ("salut @marine t'as le lien du drive ?", ["marine"]),
]


@pytest.mark.parametrize(("text", "names"), VERBS, ids=[t[:30] for t, _ in VERBS])
def test_a_name_before_a_verb_in_chat_is_found(text: str, names: list[str]) -> None:
    assert values(text) == names


NOT_VERBS = [
    "Chase said its profit rose in the third quarter.",
    "China said on Monday that talks would resume.",
    "Bill needs to be paid by Friday.",
    "Hope is not a strategy.",
    "can anyone review this before lunch?",
    "is there a fix for the login bug?",
    "did you see the ticket?",
    "@here standup in 5",
    "@channel the build is red",
    "mail it to ops@marine.com please",
    "the mia a casa è lontana",
]


@pytest.mark.parametrize("text", NOT_VERBS, ids=[t[:30] for t in NOT_VERBS])
def test_word_uses_before_verbs_stay_none(text: str) -> None:
    assert values(text) == []


# the second batch's classes: reply headers, chat exports, vocatives and requests, copy notes,
# self-introductions, "X and I", greetings to two people, "Surname, Given" in a mail header
SECOND_BATCH = [
    ("El mar, 3 dic 2026 a las 9:14, Lucía Pérez (<lucia@example.es>) escribió:", ["Lucía Pérez"]),
    ("12/03/2026, 09:14 - Marta: ok see you there", ["Marta"]),
    ("<kofi> lol that's the wrong branch", ["kofi"]),
    ("Hi Jess & Tom,\n\nattached are the minutes.", ["Jess", "Tom"]),
    ("Grace, can you take the 3pm call?", ["Grace"]),
    ("This is Hope from accounts, returning your call.", ["Hope"]),
    ("Dawn from payroll called about your timesheet.", ["Dawn"]),
    ("Hunter and I will handle the demo.", ["Hunter"]),
    ("Sarah (cc'd) will send the invoice.", ["Sarah"]),
    ("ty omar!!", ["omar"]),
    ("Merci Hugo pour le dossier !", ["Hugo"]),
    ("Hugo m'a dit que la salle était prise.", ["Hugo"]),
    ("Bises à Léo !", ["Léo"]),
    ("Bonne journée à vous,\nChantal", ["Chantal"]),
    ("To: Smith, Will\nSubject: RE: lease", ["Smith, Will"]),
    ("Best regards,\nDr. Helen Park", ["Helen Park"]),
    ("Can you forward this to Ben Church?", ["Ben Church"]),
]


@pytest.mark.parametrize(("text", "names"), SECOND_BATCH, ids=[t[:30] for t, _ in SECOND_BATCH])
def test_the_second_batch_classes_are_found(text: str, names: list[str]) -> None:
    assert values(text) == names


NOT_SECOND_BATCH = [
    "Hugo is a static site generator written in Go.",
    "Pascal and Ada are taught in year one.",
    "Sue from accounting is not involved here, it's a typo for 'due'.",
    "Hope, as they say, is not a plan.",
    "It's Summer, finally!",
    "I bought a jacket at River Island.",
    "Liberty London has a new window display.",
    "Procter & Gamble and Marks & Spencer reported results.",
    "In 2026, the board met twice.",
]


@pytest.mark.parametrize("text", NOT_SECOND_BATCH, ids=[t[:30] for t in NOT_SECOND_BATCH])
def test_the_second_batch_word_uses_stay_none(text: str) -> None:
    assert values(text) == []


def test_cc_of_given_names_is_no_surname_given_pair() -> None:
    assert sorted(set(values("cc: Emma, Liam"))) == ["Emma", "Liam"]


# a lower-case given name that is also a word, addressed after a greeting, thanks, cc or ping
ADDRESSED = [
    ("hey grace, u around?", ["grace"]),
    ("thx mark!", ["mark"]),
    ("cc will", ["will"]),
    ("hi sandy 👋", ["sandy"]),
]
NOT_ADDRESSED = ["thanks, will do", "hey man!", "thanks love", "hi june!", "ok will check tmrw", "hey there!"]


@pytest.mark.parametrize(("text", "names"), ADDRESSED, ids=[t for t, _ in ADDRESSED])
def test_a_lower_case_word_name_addressed_in_chat_is_found(text: str, names: list[str]) -> None:
    assert values(text) == names


@pytest.mark.parametrize("text", NOT_ADDRESSED)
def test_lower_case_words_after_chat_cues_stay_none(text: str) -> None:
    assert values(text) == []


def test_a_signed_full_name_may_start_with_a_place_name() -> None:
    assert values("Bien à vous,\nFlorence Petit") == ["Florence Petit"]
    assert values("Best,\nSydney Office") == []
    assert values("Kind regards,\nVictoria Station") == []
