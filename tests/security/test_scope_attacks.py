"""Prefix-cache attacks through `kvfence serve` (I1, I5, I6), for every ``--cache-scope``.

The attacker's signal is the one a real client has: ``usage.prompt_tokens_details.cached_tokens``
(exact) and, derived from it, the time to first token. A victim sends a prompt; the attacker then
sends a prompt that shares 1, 15, 16, 17 or all 40 of its tokens with the victim's. The attacker
may see cached tokens only when the scope lets the two share, and then exactly the full pages they
have in common. Further attacks: a chat template that puts a shared system prompt first, client
``cache_salt`` values and headers that try to name another tenant's scope, a revoked key, and the same
key hash filed under two organisations.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvfence.scope import CacheScope
from kvfence.server.auth.keys import hash_secret, load_keys, write_keys
from tests.server.conftest import RunningServer, serve

PAGE = 16
PROMPT_LEN = 40
VOCAB_LOW, VOCAB_HIGH = 5, 255  # token ids of the built-in model's vocabulary, clear of special tokens

# Who the attacker is, relative to the victim alice (acme / research / alice).
PAIRS = {
    "same_key": "alice",
    "same_workspace": "limited",  # acme / research, another key
    "same_org": "alice2",  # acme / sales
    "other_org": "bob",  # globex
}
SHARES = {
    CacheScope.GLOBAL: {"same_key", "same_workspace", "same_org", "other_org"},
    CacheScope.ORG: {"same_key", "same_workspace", "same_org"},
    CacheScope.WORKSPACE: {"same_key", "same_workspace"},
    CacheScope.KEY: {"same_key"},
    CacheScope.REQUEST: set(),
}


@pytest.fixture(scope="module", params=list(SHARES), ids=lambda s: s.value)
def scoped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serve(tmp_path_factory.mktemp(f"scope-{request.param.value}"), cache_scope=request.param) as running:
        yield running


def _tokens(*labels: object, n: int = PROMPT_LEN) -> list[int]:
    """A prompt no other test sends (derived from ``labels``)."""
    out: list[int] = []
    counter = 0
    while len(out) < n:
        digest = hashlib.sha256(repr((labels, counter)).encode()).digest()
        out.extend(VOCAB_LOW + b % (VOCAB_HIGH - VOCAB_LOW) for b in digest)
        counter += 1
    return out[:n]


def _cached(server: RunningServer, who: str, prompt: Any, *, headers: dict[str, str] | None = None,
            **fields: Any) -> int:
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0.0, **fields}
    r = httpx.post(server.base_url + "/v1/completions", json=body, timeout=60,
                   headers={**server.headers(who), **(headers or {})})
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


@pytest.mark.parametrize("pair", list(PAIRS))
@pytest.mark.parametrize("overlap", [1, 15, 16, 17, PROMPT_LEN])
def test_hits_follow_the_scope_and_only_full_common_pages(scoped: RunningServer, pair: str, overlap: int) -> None:
    victim = _tokens(scoped.cache_scope, pair, overlap, "victim")
    assert _cached(scoped, "alice", victim) == 0
    attacker = victim[:overlap] + _tokens(scoped.cache_scope, pair, overlap, "attacker")[overlap:]
    expected = min(overlap // PAGE, (PROMPT_LEN - 1) // PAGE) * PAGE if pair in SHARES[scoped.cache_scope] else 0
    assert _cached(scoped, PAIRS[pair], attacker) == expected


def test_a_shared_system_prompt_first_is_shared_only_inside_the_scope(scoped: RunningServer) -> None:
    system = "You are the assistant of acme. " * 4  # a byte-level tokenizer: several pages

    def chat(who: str, question: str) -> int:
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
                "max_tokens": 1, "temperature": 0.0}
        r = httpx.post(scoped.base_url + "/v1/chat/completions", json=body, headers=scoped.headers(who), timeout=60)
        assert r.status_code == 200, r.text
        return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    assert chat("alice", "What is our Q3 revenue?") == 0
    for pair, who in PAIRS.items():
        if who == "limited":
            continue  # its key caps prompts at 64 tokens
        hits = chat(who, f"Unrelated question from {who}?")
        if pair in SHARES[scoped.cache_scope]:
            assert hits >= 2 * PAGE, pair
        else:
            assert hits == 0, pair


def test_client_salts_and_headers_cannot_name_another_scope(scoped: RunningServer) -> None:
    """I5: the scope comes from the key; a client's salt only narrows it, headers and body fields never widen it."""
    if scoped.cache_scope is CacheScope.GLOBAL:
        pytest.skip("global scope shares everything by design")
    salt = "acme-team-salt"
    narrowed = _tokens(scoped.cache_scope, "narrowed")
    assert _cached(scoped, "alice", narrowed) == 0
    assert _cached(scoped, "alice", narrowed, cache_salt=salt) == 0  # a salt narrows, even for the same key
    guesses: list[dict[str, Any]] = [
        {"cache_salt": salt},  # the victim's own salt, learnt somehow
        {"cache_salt": "acme"}, {"cache_salt": "org:acme"}, {"cache_salt": scoped.scope_key("alice").hex()},
        {"user": "alice"}, {"prompt_cache_key": "acme"},
    ]
    headers = ["OpenAI-Organization", "OpenAI-Project", "X-Organization", "X-Kvfence-Org", "X-Cache-Scope"]
    attacks: list[tuple[dict[str, Any], dict[str, str]]] = [(g, {}) for g in guesses] + [({}, {h: "acme"}) for h in headers]
    for i, (fields, extra_headers) in enumerate(attacks):
        victim = _tokens(scoped.cache_scope, "salted victim", i)  # fresh, so only alice's send can be cached
        assert _cached(scoped, "alice", victim, cache_salt=salt) == 0
        assert _cached(scoped, "alice", victim) == 0
        assert _cached(scoped, "bob", victim, headers=extra_headers, **fields) == 0, (fields, extra_headers)
    victim = _tokens(scoped.cache_scope, "two keys")
    assert _cached(scoped, "alice", victim) == 0
    both = {"Authorization": f"Bearer {scoped.keys['bob']}", "x-api-key": scoped.keys["alice"]}
    r = httpx.post(scoped.base_url + "/v1/completions", json={"prompt": victim, "max_tokens": 1}, headers=both,
                   timeout=60)
    # two credentials that disagree are refused outright: neither key's scope is used, nothing is scheduled
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "ambiguous_credentials"
    assert _cached(scoped, "bob", victim) == 0  # and bob's own request still sees nothing of alice's


# ---- keys changing under a running server ---------------------------------------------------------


@pytest.fixture
def org_server(tmp_path: Path) -> Iterator[tuple[RunningServer, Path]]:
    with serve(tmp_path, cache_scope=CacheScope.ORG) as running:
        yield running, tmp_path / "keys.toml"


def _wait_for_status(server: RunningServer, who: str, status: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.post(server.base_url + "/v1/completions", json={"prompt": [7, 8], "max_tokens": 1},
                       headers=server.headers(who), timeout=60)
        if r.status_code == status:
            return
        assert time.monotonic() < deadline, f"{who}: still {r.status_code}, expected {status}"
        time.sleep(0.2)


def test_a_key_revoked_mid_stream_ends_that_stream_and_nothing_after(org_server: tuple[RunningServer, Path]) -> None:
    server, keys_path = org_server
    body = {"prompt": _tokens("revoked"), "max_tokens": 200, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", server.base_url + "/v1/completions", json=body, headers=server.headers("alice"),
                      timeout=60) as r:
        lines = r.iter_lines()
        first = next(line for line in lines if line.startswith("data:"))
        assert first
        write_keys(keys_path, [k for k in load_keys(keys_path) if k.name != "alice"])
        rest = [line for line in lines if line.startswith("data:")]
    assert rest[-1] == "data: [DONE]"  # admitted under its key: it finishes in alice's own scope
    _wait_for_status(server, "alice", 401)
    _wait_for_status(server, "bob", 200)
    server.wait_idle()
    assert server.engine.block_manager.num_used_pages == 0


def test_the_same_key_filed_under_two_orgs_never_switches_org(org_server: tuple[RunningServer, Path]) -> None:
    """A keys file that gives alice's hash to globex too is invalid: the server keeps the last good keys."""
    server, keys_path = org_server
    victim = _tokens("two orgs victim")
    assert _cached(server, "bob", victim) == 0
    keys = load_keys(keys_path)
    alice = next(k for k in keys if k.name == "alice")
    assert alice.sha256 == hash_secret(server.keys["alice"])
    text = keys_path.read_text() + (
        f'\n[[keys]]\norganization = "globex"\nworkspace = "default"\nname = "alice-at-globex"\nsha256 = "{alice.sha256}"\n'
    )
    keys_path.write_text(text)
    time.sleep(1.5)  # past the reload interval
    assert _cached(server, "alice", victim) == 0  # still acme: bob's (globex) cache stays out of reach
    assert _cached(server, "bob", victim) == (PROMPT_LEN - 1) // PAGE * PAGE
