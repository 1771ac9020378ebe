"""Issue 16, 2 on a cold index, through a real ``kvfence gateway`` and a leaky backend.

One tenant (or several) sends common phrases before the model has written them for anyone; every
other tenant's answer carrying one is then foreign evidence. With ``withheld_orgs: 3`` (the default)
and the ordinariness test (leak/ordinary.py) such a phrase, being ordinary words, is withheld from at
most three organizations, then delivered whole; a span with a name and a figure is withheld
from every organization, plain or disguised (leetspeak, ROT13). Streamed and whole answers alternate.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import Gateway
from tests.gateway.protection.test_e2e_leak_repeats import leak_policy, set_mode
from tests.gateway.protection.test_e2e_protection import LeakyBackend, backend  # noqa: F401  (the fixture)

ORGS = ["acme", *[f"poisoner{i}" for i in range(3)], *[f"org{i}" for i in range(24)]]
KEYS = {org: f"kvf-cold-{org}-key" for org in ORGS}
PHRASES = [
    "I'm sorry, but I can't help with that request. If you have another question, I'd be happy to help.",
    "Please let me know if you have any further questions or concerns about this matter today.",
    "Thank you for reaching out. I hope this helps, and feel free to ask if anything is unclear.",
]


@pytest.fixture(scope="module")
def gw(backend: LeakyBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("cold-gw")
    policy = leak_policy(backend, tmp, KEYS)
    g = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "c" * 32})
    yield g
    g.stop()


def ask(gw: Gateway, who: str, text: str = "hello there", stream: bool = False) -> tuple[bool, str]:
    """(withheld, what the client read) for one chat request of ``who``."""
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "stream": stream}
    answer = httpx.post(gw.url + "/chat/completions", json=body, timeout=30,
                        headers={"authorization": f"Bearer {KEYS[who]}"})
    assert answer.status_code in ((200,) if stream else (200, 502)), answer.text
    return "cross_tenant_leak" in answer.text, answer.text


def asked(gw: Gateway, who: str, stream: bool) -> bool:
    return ask(gw, who, stream=stream)[0]


def test_one_poisoner_on_a_cold_index_makes_few_answers_withheld(
        gw: Gateway, backend: LeakyBackend) -> None:  # noqa: F811
    phrase = PHRASES[0]
    set_mode(backend, "benign")
    assert not ask(gw, "poisoner0", f"Repeat this exactly: {phrase}")[0]
    set_mode(backend, "fixed", text=f"Well. {phrase} Bye.")
    outcomes = [asked(gw, f"org{i}", stream=i % 2 == 1) for i in range(20)]
    # before: 20/20 withheld, each a false incident naming poisoner0
    assert outcomes == [True] * 3 + [False] * 17, outcomes


def test_several_poisoners_with_several_phrases_and_a_real_leak_at_the_same_time(
        gw: Gateway, backend: LeakyBackend) -> None:  # noqa: F811
    set_mode(backend, "benign")
    for i, phrase in enumerate(PHRASES[1:], start=1):
        assert not ask(gw, f"poisoner{i}", f"Always say: {phrase}")[0]
    withheld = {phrase: 0 for phrase in PHRASES[1:]}
    for i in range(24):
        phrase = PHRASES[1 + i % 2]
        set_mode(backend, "fixed", text=f"Sure. {phrase}")
        withheld[phrase] += asked(gw, f"org{i}", stream=i % 3 == 0)
    assert list(withheld.values()) == [3, 3], withheld  # three organizations per phrase, then common
    secret = "Halvorsen Maritime pays 412 million euros to Tideline on the third of March, says Ingrid Solberg."
    set_mode(backend, "benign")
    assert not ask(gw, "acme", secret)[0]
    set_mode(backend, "fixed", text=f"{PHRASES[1]} {secret}")  # the campaign's phrase, then acme's span
    assert asked(gw, "org23", stream=False) and asked(gw, "org22", stream=True)


@pytest.mark.parametrize("disguise", ["plain", "leet", "rot13"])
def test_a_distinctive_span_leaked_to_ten_organizations_is_withheld_ten_times(
        gw: Gateway, backend: LeakyBackend, disguise: str) -> None:  # noqa: F811
    secret = f"Project {disguise} Halvorsen Maritime pays 412 million euros to Tideline on the third of March"
    said = {"plain": secret, "leet": secret.replace("e", "3").replace("o", "0"),
            "rot13": codecs.encode(secret, "rot13")}[disguise]
    set_mode(backend, "benign")
    assert not ask(gw, "acme", secret)[0]
    set_mode(backend, "fixed", text=f"Here is what I found: {said}")
    outcomes = [asked(gw, f"org{i}", stream=i % 2 == 0) for i in range(10)]
    assert all(outcomes), outcomes
