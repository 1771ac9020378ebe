"""Leak detection at the detector level: foreign n-gram runs, common phrases, own text, canaries, Redis."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.gateway.protection.leak.fingerprint import Fingerprinter, words
from kvfence.gateway.protection.leak.index import InMemoryIndex, RedisIndex
from kvfence.gateway.protection.leak.scan import RECEIVED, CanaryBook, LeakMonitor, received_by

KEY = b"test-key-0123456789abcdef"

SECRET_PROMPT = ("Draft the acquisition memo for Project Bluefin: Halvorsen Maritime agrees to buy Tideline "
                 "Logistics for 412 million euros, closing on the third of March, board vote stays confidential.")


def monitor(index: InMemoryIndex | RedisIndex | None = None, **kw: int) -> LeakMonitor:
    return LeakMonitor(index if index is not None else InMemoryIndex(900), Fingerprinter(KEY, 4), min_run=kw.get("min_run", 4),
                       max_owners=kw.get("max_owners", 1), canaries=CanaryBook(KEY, {"acme": ["ACME-CANARY-7731"]}))


def stream(m: LeakMonitor, tenant: str, own_texts: list[str], answer: str, chunk: int = 7) -> object:
    scanner = m.scanner(tenant, m.record_prompt(tenant, own_texts))
    for i in range(0, len(answer), chunk):
        evidence = scanner.feed(answer[i:i + chunk])
        if evidence is not None:
            return evidence
    return scanner.finish()


def test_words_and_fingerprints_hold_no_text() -> None:
    assert words("Hello, World! ça-va") == ["heiio", "worid", "ça", "va"]  # "l" read as "i" (leetspeak "1")
    fp = Fingerprinter(KEY, 3)
    other = Fingerprinter(b"another-key-0123456789", 3)
    assert fp.of_text("ab cd ef gh") != other.of_text("ab cd ef gh")
    assert len(fp.of_text("ab cd ef gh")) == 2
    assert words("h a l v o r s e n  m a r i t i m e, H4lv0rs3n") == ["haivorsen", "maritime", "haivorsen"]


def test_another_tenants_prompt_in_an_answer_is_caught() -> None:
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    leaked = " ".join(SECRET_PROMPT.split()[5:21])  # 16 words of acme's prompt
    evidence = stream(m, "globex", ["Summarise our Q3 newsletter"], f"Here is the summary: {leaked}. Done.")
    assert evidence is not None
    assert evidence.detector == "ngram" and evidence.owners == ("acme",)
    assert all(len(h) == 16 for h in evidence.fingerprints)


def test_own_prompt_echoed_back_is_no_leak() -> None:
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    assert stream(m, "acme", ["Repeat my earlier memo"], SECRET_PROMPT) is None
    assert stream(m, "globex", [SECRET_PROMPT], SECRET_PROMPT) is None  # globex sent it itself too


def test_phrases_many_tenants_send_are_no_evidence() -> None:
    m = monitor()
    common = "please summarise the following document in three bullet points for an executive audience"
    m.record_prompt("t1", [common + " about shipping"])
    m.record_prompt("t2", [common + " about payroll"])
    assert stream(m, "t3", ["hello"], "Sure, " + common) is None


def test_short_overlaps_do_not_trigger() -> None:
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    six = " ".join(SECRET_PROMPT.split()[:6])  # 6 words < 4 + 4 - 1
    assert stream(m, "globex", ["hi"], f"unrelated text {six} and more unrelated words here") is None


def test_window_expiry_forgets_old_prompts() -> None:
    now = [1000.0]
    index = InMemoryIndex(60, clock=lambda: now[0])
    m = monitor(index)
    m.record_prompt("acme", [SECRET_PROMPT])
    now[0] += 61
    m.record_prompt("other", ["something else entirely different here today"])
    assert stream(m, "globex", ["hi"], SECRET_PROMPT) is None
    owners = index.owners(list(Fingerprinter(KEY, 4).of_text(SECRET_PROMPT)))
    assert all("acme" not in o and received_by("acme") not in o for o in owners)  # acme's entries are gone


def test_foreign_canary_is_caught_even_split_across_chunks() -> None:
    m = monitor()
    evidence = stream(m, "globex", ["hi"], "the marker was ACME-CANARY-7731 in the text", chunk=3)
    assert evidence is not None and evidence.detector == "canary" and evidence.owners == ("acme",)
    derived = m.canaries.derived("initech") if m.canaries else ""
    evidence = stream(m, "globex", ["hi"], f"x {derived} y", chunk=4)
    assert evidence is not None and evidence.owners == ("initech",)
    assert stream(m, "acme", ["hi"], "our own ACME-CANARY-7731 is fine") is None


@pytest.mark.parametrize("span_words", [8, 16, 32])
def test_detection_of_leaked_spans(span_words: int) -> None:
    rng = random.Random(span_words)
    m = monitor()
    vocab = [f"w{i}" for i in range(3000)]
    prompts = {f"t{i}": " ".join(rng.choice(vocab) for _ in range(80)) for i in range(20)}
    for tenant, prompt in prompts.items():
        m.record_prompt(tenant, [prompt])
    caught = 0
    for trial in range(40):
        victim = f"t{trial % 20}"
        tokens = prompts[victim].split()
        start = rng.randrange(0, len(tokens) - span_words)
        leak = " ".join(tokens[start:start + span_words])
        answer = f"Well, here is something: {leak}. Anything else?"
        if stream(m, "receiver", ["question"], answer) is not None:
            caught += 1
    assert caught == 40


@pytest.mark.redis
def test_redis_index_shared_by_two_replicas(redis_url: str) -> None:
    prefix = f"kvfence-test:{random.random()}:"
    replica1 = monitor(RedisIndex(redis_url, window_s=60, prefix=prefix))
    replica2 = monitor(RedisIndex(redis_url, window_s=60, prefix=prefix))
    replica1.record_prompt("acme", [SECRET_PROMPT])
    evidence = stream(replica2, "globex", ["hi"], SECRET_PROMPT)
    assert evidence is not None and evidence.owners == ("acme",)
    assert stream(replica2, "acme", ["hi"], SECRET_PROMPT) is None
    replica1.index.close()
    replica2.index.close()


@pytest.mark.redis
def test_redis_index_expires(redis_url: str) -> None:
    now = [5000.0]
    index = RedisIndex(redis_url, window_s=30, prefix=f"kvfence-test:{random.random()}:", clock=lambda: now[0])
    index.add("acme", [1, 2, 3])
    assert index.owners([1, 4]) == [frozenset({"acme"}), frozenset()]
    now[0] += 31
    assert index.owners([1]) == [frozenset()]
    index.close()


def test_a_phrase_is_common_only_once_several_organizations_have_it() -> None:
    phrase = "please let me know if you have any further questions or concerns about this"
    fresh = monitor()
    fresh.record_prompt("acme", [f"Draft a reply to the supplier. End with: {phrase}"])
    assert stream(fresh, "globex", ["x"], f"Hello. {phrase}.") is not None  # nobody else ever had it
    m = monitor()
    # The model wrote the sentence in one finished answer to initech: one organization's answer is no
    # evidence that it is common language (a model restates its asker's data) ...
    assert stream(m, "initech", ["write a polite note"], f"Dear Sam, thanks. {phrase}.") is None
    m.record_prompt("acme", [f"Draft a reply to the supplier. End with: {phrase}"])
    assert stream(m, "globex", ["x"], f"Hello. {phrase}.", chunk=999) is not None
    # ... and globex's withheld answer is none either (an incident records nothing): hooli is withheld too.
    assert stream(m, "hooli", ["write a polite note"], f"Dear Kim. {phrase}.") is not None
    # Delivered answers to three organizations before anyone claimed it are: it is common language.
    m1 = monitor()
    for org in ("initech", "stark", "wayne"):
        assert stream(m1, org, ["write a polite note"], f"Dear Sam, thanks. {phrase}.") is None
    m1.record_prompt("acme", [f"Draft a reply to the supplier. End with: {phrase}"])
    assert stream(m1, "globex", ["x"], f"Hello. {phrase}.") is None
    assert stream(m1, "umbrella", ["x"], f"Hi. {phrase}.") is None
    # Text an asker copied from its own prompt is its own; two senders are common (max_owners 1).
    m2 = monitor()
    assert stream(m2, "hooli", [f"Use the closing line {phrase}"], f"Sure: {phrase}") is None
    m2.record_prompt("acme", [f"End with: {phrase}"])
    assert stream(m2, "globex", ["x"], f"Hello. {phrase}.") is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30), st.booleans())
def test_verdict_does_not_depend_on_chunking(sizes: list[int], leak: bool) -> None:
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    middle = " ".join(SECRET_PROMPT.split()[3:19]) if leak else "an entirely harmless sentence about the weather"
    answer = f"Intro words here, {middle}, and an ending."
    scanner = m.scanner("globex", m.record_prompt("globex", ["question"]))
    evidence, pos, i = None, 0, 0
    while pos < len(answer) and evidence is None:
        step = sizes[i % len(sizes)]
        evidence = scanner.feed(answer[pos:pos + step])
        pos, i = pos + step, i + 1
    evidence = evidence or scanner.finish()
    assert (evidence is not None) == leak


def test_a_tenants_own_old_prompt_handed_back_does_not_whitelist_it() -> None:
    # An engine hands acme its own earlier prompt (no leak for acme: it owns the text) ...
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    assert stream(m, "acme", ["what did I ask before?"], SECRET_PROMPT) is None
    # ... which must not turn acme's text into "model language": the same text reaching globex
    # afterwards is still acme's, and still a leak.
    evidence = stream(m, "globex", ["hello"], SECRET_PROMPT)
    assert evidence is not None and evidence.owners == ("acme",)


def test_every_answer_is_recorded_as_received_by_its_tenant_never_as_anyones_language() -> None:
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    model_words = "the weather in the harbour town stays mild and bright for most of the spring season"
    assert stream(m, "acme", ["tell me something"], f"{SECRET_PROMPT} {model_words}") is None
    recorded = m.index.owners(sorted(m.fingerprint([model_words])))
    assert recorded and all(owners == frozenset({received_by("acme")}) for owners in recorded)
    assert all(o.startswith(RECEIVED) or o == "acme" for owners in m.index.owners(sorted(m.fingerprint([SECRET_PROMPT])))
               for o in owners)


def test_history_the_model_wrote_for_a_tenant_is_that_tenants_when_it_sends_it_back() -> None:
    """Issue 16, 1: acme's multi-turn chat resends the model's earlier answer, which restated acme's
    confidential material in the model's own words; that text is acme's, and reaching globex it is a leak."""
    m = monitor()
    question = "Summarise our plan: Halvorsen buys Tideline for 412 million euros in March."
    restated = ("In short, the shipping group intends to take over its logistics rival for roughly four hundred "
                "and twelve million, with completion expected early in spring and the vote kept quiet.")
    assert stream(m, "acme", [question], restated) is None  # the model's words, written for acme
    history = [question, restated, "Now draft the press release."]
    assert stream(m, "acme", history, "Here is a draft press release for the announcement.") is None
    evidence = stream(m, "globex", ["what's new?"], f"Sure. {restated}")
    assert evidence is not None and evidence.owners == ("acme",)


REFUSAL = ("I'm sorry, but I can't help with that request. If you have another question, "
           "I'd be happy to help with something else.")


@pytest.mark.parametrize("chunk", [7, 999])
def test_poisoning_a_phrase_the_model_already_writes_withholds_nothing(chunk: int) -> None:
    """Issue 16, 2: a phrase the model has written for ``common_orgs`` organizations is common language;
    a tenant that sends it afterwards (poisoning) makes no answer withheld, streamed or whole."""
    m = monitor()
    for i in range(m.common_orgs):  # the model writes its refusal for three organizations
        assert stream(m, f"early{i}", [f"question {i} about the weather"], REFUSAL, chunk=chunk) is None
    m.record_prompt("mallory", [f"Repeat after me: {REFUSAL}"])
    withheld = [stream(m, f"victim{i}", [f"question {i} about taxes"], REFUSAL, chunk=chunk) is not None
                for i in range(20)]
    assert not any(withheld)
    m.record_prompt("acme", [SECRET_PROMPT])  # and a real leak at the same time is still caught
    assert stream(m, "victim3", ["hi"], f"{REFUSAL} {SECRET_PROMPT}", chunk=chunk) is not None


@pytest.mark.parametrize("chunk", [7, 999])
def test_a_withheld_answer_records_nothing_streamed_or_whole(chunk: int) -> None:
    """Issue 16, 2 (the K = 3 hole) and the streamed/whole difference: an incident is no evidence that a
    phrase is common, so a phrase only one tenant sent stays that tenant's however often it is withheld."""
    m = monitor()
    m.record_prompt("mallory", [f"Repeat after me: {REFUSAL}"])
    withheld = [stream(m, f"victim{i}", [f"question {i} about taxes"], f"Well. {REFUSAL} Bye now, see you.",
                       chunk=chunk) is not None for i in range(10)]
    # REFUSAL is all ordinary words: with withheld_orgs 3 (the default) it is withheld from three
    # organizations, then common (test_leak_ordinary.py); a distinctive span never is
    assert withheld == [True] * 3 + [False] * 7
    assert all(received_by(f"victim{i}") not in o for o in m.index.owners(sorted(m.fingerprint([REFUSAL])))
               for i in range(3))


@pytest.mark.parametrize("receivers", [3, 5, 10])
@pytest.mark.parametrize("chunk", [7, 999])
def test_a_leak_repeated_to_more_organizations_is_withheld_every_time(receivers: int, chunk: int) -> None:
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    leaked = " ".join(SECRET_PROMPT.split()[4:20])
    caught = [stream(m, f"org{i}", [f"hello {i}"], f"Here you go: {leaked}. Anything else?", chunk=chunk)
              for i in range(receivers)]
    assert all(e is not None and e.owners == ("acme",) for e in caught)


def test_a_leak_in_pieces_shorter_than_a_run_does_not_make_the_whole_span_common() -> None:
    """Pieces of acme's text in delivered answers (each shorter than a run) are evidence n-grams, never
    recorded: the whole span reaching a fourth organization afterwards is still caught."""
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    words_ = SECRET_PROMPT.split()
    for i in range(4):
        pieces = " and also ".join(" ".join(words_[j:j + 6]) for j in range(0, len(words_) - 6, 3))
        assert stream(m, f"org{i}", [f"hello {i}"], pieces) is None  # 6-word pieces: no run of 7
    assert stream(m, "org9", ["hi"], SECRET_PROMPT) is not None


@pytest.mark.parametrize("chunk", [7, 999])
def test_same_organization_many_keys_and_mixed_receivers(chunk: int) -> None:
    """Receivers counted as organizations (the default unit): three keys of one org are one org; a mix
    of orgs and repeated keys still never makes acme's span common."""
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    leaked = " ".join(SECRET_PROMPT.split()[2:18])
    for receiver in ["globex", "globex", "globex", "initech", "globex", "umbrella", "hooli", "initech", "stark"]:
        assert stream(m, receiver, ["hi"], f"Sure: {leaked}", chunk=chunk) is not None, receiver


def test_lookalike_letters_do_not_hide_a_leak() -> None:
    m = monitor()
    m.record_prompt("acme", [SECRET_PROMPT])
    lookalike = SECRET_PROMPT.replace("a", "\u0430").replace("o", "\u043e").replace("e", "\u0435")  # Cyrillic
    evidence = stream(m, "globex", ["hi"], f"Here: {lookalike}")
    assert evidence is not None and evidence.owners == ("acme",)


@pytest.mark.parametrize("disguise", [str.lower, str.upper, lambda c: " ".join(c), lambda c: c.replace("-", " - "),
                                      lambda c: c.replace("-", "_"), lambda c: "\u200b".join(c),
                                      lambda c: c.replace("A", "\u0410").replace("C", "\u0421")])
def test_a_canary_is_caught_whatever_its_case_or_separators(disguise: object) -> None:
    m = monitor()
    assert callable(disguise)
    derived = m.canaries.derived("initech") if m.canaries else ""
    for canary, owner in (("ACME-CANARY-7731", "acme"), (derived, "initech")):
        evidence = stream(m, "globex", ["hi"], f"the marker is {disguise(canary)} ok", chunk=3)
        assert evidence is not None and evidence.detector == "canary" and evidence.owners == (owner,), canary


@pytest.mark.redis
def test_provenance_and_common_language_hold_on_the_redis_index(redis_url: str) -> None:
    prefix = f"kvfence-test:{random.random()}:"
    replica1 = monitor(RedisIndex(redis_url, window_s=60, prefix=prefix))
    replica2 = monitor(RedisIndex(redis_url, window_s=60, prefix=prefix))
    restated = ("In short, the shipping group intends to take over its logistics rival for roughly four hundred "
                "and twelve million, with completion expected early in spring.")
    assert stream(replica1, "acme", [SECRET_PROMPT], restated) is None
    assert stream(replica1, "acme", [SECRET_PROMPT, restated, "Now the press release."], "Here it is.") is None
    evidence = stream(replica2, "globex", ["news?"], restated)  # another replica, the same index
    assert evidence is not None and evidence.owners == ("acme",)
    refusal = "I am sorry, but I cannot help with that request. Please ask me something else instead."
    for i in range(3):  # the model writes its refusal for three organizations, through either replica
        assert stream(replica2 if i % 2 else replica1, f"early{i}", ["q"], refusal, chunk=999) is None
    replica1.record_prompt("mallory", [refusal])
    withheld = [stream(replica2 if i % 2 else replica1, f"v{i}", ["q"], refusal, chunk=999) is not None
                for i in range(8)]
    assert not any(withheld)
    leaked = " ".join(SECRET_PROMPT.split()[4:20])
    assert all(stream(replica2 if i % 2 else replica1, f"r{i}", ["q"], leaked) is not None for i in range(5))
    replica1.index.close()
    replica2.index.close()


_READINGS = {
    "rot13": lambda t: t.translate(str.maketrans("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                                 "nopqrstuvwxyzabcdefghijklmNOPQRSTUVWXYZABCDEFGHIJKLM")),
    "words_reversed": lambda t: " ".join(w[::-1] for w in t.split()),
    "reversed": lambda t: t[::-1],
    "leet": lambda t: t.translate(str.maketrans("aeiost", "431057")),
    "spaced": lambda t: "   ".join(" ".join(w) for w in t.split()),
}


@pytest.mark.parametrize("reading", sorted(_READINGS))
@pytest.mark.parametrize("chunk", [3, 8, 999])
def test_the_shortest_disguised_run_is_caught_wherever_it_starts(reading: str, chunk: int) -> None:
    """Seven words of acme's prompt (one run of four 4-grams, the minimum), disguised, after 0 to 8
    words of the model's own: the readings other than the plain one are looked up only every fourth
    position (and backwards from a hit), which must catch the run whatever its offset."""
    seven = " ".join(SECRET_PROMPT.split()[3:10])
    for offset in range(9):
        m = monitor()
        m.record_prompt("acme", [SECRET_PROMPT])
        model_words = " ".join(["sure", "here", "is", "what", "you", "asked", "for", "my", "friend"][:offset])
        leaked = _READINGS[reading](seven)
        text = f"{leaked} {model_words}".strip() if reading == "reversed" else f"{model_words} {leaked}".strip()
        evidence = stream(m, "globex", ["hello"], text, chunk=chunk)
        assert evidence is not None and evidence.owners == ("acme",), (offset, text)
        six = " ".join(SECRET_PROMPT.split()[3:9])  # and six words are not a run
        m2 = monitor()
        m2.record_prompt("acme", [SECRET_PROMPT])
        assert stream(m2, "globex", ["hello"], f"{model_words} {_READINGS[reading](six)} and so on".strip(),
                      chunk=chunk) is None, (offset, six)


@pytest.mark.parametrize("chunk", [7, 999])
def test_withheld_orgs_trades_the_repeated_leak_for_availability_when_the_operator_asks(chunk: int) -> None:
    """``withheld_orgs: 3`` (the default): a phrase of ordinary words one tenant sends and the model
    writes for everyone is withheld from three organizations, then common; the same holds for a leak
    made of ordinary words only, the price the docs state (a distinctive one: test_leak_ordinary.py)."""
    m = LeakMonitor(InMemoryIndex(900), Fingerprinter(KEY, 4), withheld_orgs=3)
    m.record_prompt("acme", [f"Always end with: {REFUSAL}"])
    withheld = [stream(m, f"org{i}", [f"question {i}"], REFUSAL, chunk=chunk) is not None for i in range(20)]
    grams = len(words(REFUSAL)) - 3
    # each withheld answer counts the run it was stopped on: the phrase wears out one run at a time
    assert all(withheld[:3]) and sum(withheld) <= 3 * -(-grams // 4) and not any(withheld[-5:]), withheld
    with pytest.raises(ValueError, match="withheld_orgs"):
        LeakMonitor(InMemoryIndex(900), Fingerprinter(KEY, 4), withheld_orgs=1)
    from kvfence.gateway.protection.config import LeakConfig
    with pytest.raises(ValueError, match="withheld_orgs is 1"):
        LeakConfig(withheld_orgs=1)
