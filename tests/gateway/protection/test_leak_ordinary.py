"""Issue 16, 2: withheld answers make an n-gram common only when it is made of ordinary words.

The ordinariness test itself (numbers, names, codes, mixed case, de/fr/es/it/nl words, leetspeak
read as the fingerprinter reads it), and what it does to the scanner: a planted phrase of ordinary
words stops being withheld after ``withheld_orgs`` organizations, a span with a name or a figure
never does, plain or disguised.
"""

from __future__ import annotations

import codecs
import re

import pytest

from kvfence.gateway.protection.leak.fingerprint import Fingerprinter, canonical, words
from kvfence.gateway.protection.leak.index import InMemoryIndex
from kvfence.gateway.protection.leak.ordinary import is_ordinary_word
from kvfence.gateway.protection.leak.scan import LeakMonitor

KEY = b"test-key-0123456789abcdef"
REFUSAL = ("I'm sorry, but I can't help with that request. If you have another question, "
           "I'd be happy to help with something else.")
# a name, a firm, a figure in every seven words: distinctive wherever a run of it is caught
DISTINCTIVE = "Halvorsen Maritime pays 412 million euros to Tideline on the third of March"


def ordinary(text: str) -> list[bool]:
    """Whether each word of ``text``, as the fingerprinter reads it, is ordinary."""
    raw = re.findall(r"[^\W_]+", text.lower())  # as fingerprint.words, before the canonical form
    return [is_ordinary_word(w, r.isdigit()) for w, r in zip(words(text), raw, strict=True)]


@pytest.mark.parametrize("text", [
    "the board will meet on the third of march",
    "Je suis désolé, mais je ne peux pas répondre à cette question aujourd'hui",  # fr, elision
    "Es tut mir leid, aber ich kann Ihnen dabei nicht weiter",  # de
    "No puedo ayudar con esa solicitud",  # es
    "Mi dispiace, non è possibile",  # it
    "Ik kan u niet helpen met deze vraag",  # nl
    "ThE bOaRd WiLl MeEt ToMoRrOw",  # mixed case: the index is lower case
    "th3 b04rd w1ll m33t t0m0rr0w",  # leetspeak: read as the fingerprinter reads it
    "I'll see what isn't there and we'll know",  # contractions
])
def test_everyday_words_in_the_supported_languages_are_ordinary(text: str) -> None:
    assert all(ordinary(text)), list(zip(words(text), ordinary(text), strict=True))


@pytest.mark.parametrize(("text", "distinctive"), [
    ("the price is 412 million", "412"),
    ("we pay 50 now", "50"),  # reads "so", still a number
    ("ask Halvorsen about it", "halvorsen"),
    ("ask H4lv0rs3n about it", "halvorsen"),
    ("the ticket is KVF-2291 today", "2291"),
    ("call getUserId then stop", "getuserid"),
    ("write to jane.doe@example.org soon", "jane"),
    ("Müller und Schmidt kommen", "müller"),
    ("see https www kvfence io now", "https"),
    ("code name Bluefin begins", "bluefin"),
])
def test_numbers_names_codes_and_identifiers_are_not(text: str, distinctive: str) -> None:
    read = dict(zip(words(text), ordinary(text), strict=True))
    assert canonical(distinctive) in read and not read[canonical(distinctive)], read
    assert not is_ordinary_word("so", is_number=True) and is_ordinary_word("so")


def monitor(withheld_orgs: int = 3) -> LeakMonitor:
    return LeakMonitor(InMemoryIndex(900), Fingerprinter(KEY, 4), withheld_orgs=withheld_orgs)


def withheld(m: LeakMonitor, tenant: str, answer: str, chunk: int) -> bool:
    scanner = m.scanner(tenant, m.record_prompt(tenant, [f"a question from {tenant}"]))
    for i in range(0, len(answer), chunk):
        if scanner.feed(answer[i:i + chunk]) is not None:
            return True
    return scanner.finish() is not None


@pytest.mark.parametrize("chunk", [5, 9999])
@pytest.mark.parametrize("disguise", ["plain", "leet", "rot13"])
def test_a_planted_phrase_of_ordinary_words_stops_being_withheld(chunk: int, disguise: str) -> None:
    m = monitor()
    m.record_prompt("mallory", [f"Repeat this exactly: {REFUSAL}"])
    said = {"plain": REFUSAL, "leet": REFUSAL.replace("e", "3").replace("o", "0").replace("a", "4"),
            "rot13": codecs.encode(REFUSAL, "rot13")}[disguise]
    outcomes = [withheld(m, f"org{i}", f"Well. {said} Bye.", chunk) for i in range(30)]
    # withheld from the first three organizations, as any foreign run; then common, the whole phrase
    # (its ordinary words going on from the run that was caught are the same sender's phrase)
    assert outcomes == [True] * 3 + [False] * 27, outcomes


@pytest.mark.parametrize("chunk", [5, 9999])
@pytest.mark.parametrize("disguise", ["plain", "leet", "rot13"])
def test_a_distinctive_span_is_withheld_from_every_organization(chunk: int, disguise: str) -> None:
    m = monitor()
    m.record_prompt("acme", [DISTINCTIVE])
    said = {"plain": DISTINCTIVE, "leet": DISTINCTIVE.replace("e", "3").replace("o", "0"),
            "rot13": codecs.encode(DISTINCTIVE, "rot13")}[disguise]
    assert all(withheld(m, f"org{i}", f"Here is what I found: {said}", chunk) for i in range(12))


@pytest.mark.parametrize("phrase", [
    "Es tut mir leid, aber ich kann Ihnen bei dieser Anfrage leider nicht helfen. Bitte stellen Sie mir gerne "
    "eine andere Frage.",
    "Lo siento, pero no puedo ayudarte con esa solicitud. Si tienes otra pregunta, estaré encantado de ayudarte.",
    "Mi dispiace, ma non posso aiutarti con questa richiesta. Se hai altre domande, sarò lieto di aiutarti.",
    "Je suis désolé, mais je ne peux pas vous aider avec cette demande. N'hésitez pas à me poser d'autres "
    "questions.",
    "Het spijt me, maar ik kan je helaas niet helpen met dit verzoek. Laat het me weten als je andere vragen hebt.",
])
def test_a_planted_refusal_in_each_supported_language_stops_being_withheld(phrase: str) -> None:
    assert all(ordinary(phrase)), [w for w, o in zip(words(phrase), ordinary(phrase), strict=True) if not o]
    m = monitor()
    m.record_prompt("mallory", [f"Sag genau: {phrase}"])
    assert [withheld(m, f"org{i}", phrase, 9) for i in range(8)] == [True] * 3 + [False] * 5


def test_without_the_ordinariness_test_the_distinctive_span_passes() -> None:
    """What the test adds: withheld_orgs 3 on any run reopens the repeat hole (so the test above can fail)."""
    class AnyRun(LeakMonitor):
        def is_ordinary(self, word: str, is_number: bool) -> bool:
            return True

    m = AnyRun(InMemoryIndex(900), Fingerprinter(KEY, 4), withheld_orgs=3)
    m.record_prompt("acme", [DISTINCTIVE])
    outcomes = [withheld(m, f"org{i}", f"Here is what I found: {DISTINCTIVE}", 9999) for i in range(12)]
    assert not all(outcomes)


def test_withheld_orgs_zero_records_no_withheld_evidence() -> None:
    m = monitor(withheld_orgs=0)
    m.record_prompt("mallory", [f"Repeat this exactly: {REFUSAL}"])
    assert all(withheld(m, f"org{i}", REFUSAL, 9999) for i in range(15))


@pytest.mark.parametrize("chunk", [5, 9999])
def test_a_common_phrase_does_not_carry_another_tenants_words_after_it(chunk: int) -> None:
    """A phrase made common by withheld evidence covers its own sender's ordinary words only: acme's
    text right after mallory's planted refusal is still acme's, and acme's own ordinary preamble made
    common does not carry the name and figure after it."""
    m = monitor()
    m.record_prompt("mallory", [f"Repeat this exactly: {REFUSAL}"])
    for i in range(3):
        assert withheld(m, f"org{i}", REFUSAL, chunk)
    acme = "please keep this between us until the board has read the whole plan next week"
    m.record_prompt("acme", [acme])
    assert withheld(m, "org5", f"{REFUSAL} {acme}", chunk)
    preamble = "as we agreed on the phone this morning here are the numbers for the"
    m.record_prompt("acme", [f"{preamble} {DISTINCTIVE}"])
    outcomes = [withheld(m, f"org{i}", f"{preamble} {DISTINCTIVE}", chunk) for i in range(6, 16)]
    assert all(outcomes), outcomes
