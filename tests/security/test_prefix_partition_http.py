"""I6 over HTTP: another organization's prompt length does not show in my ``cached_tokens``.

The prime + probe attack of :mod:`tests.security.test_scrub_attacks`, as a client sees it: bob
(globex) sends two long prompts, alice (acme) sends a prompt of some length, bob sends his prompts
again and reads ``usage.prompt_tokens_details.cached_tokens``. The same rounds against a server
started with the unsafe shared LRU show that the probe is sharp enough to see the victim there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.conftest import RunningServer, engine_factory, serve

PAGE = 16
ATTACKER_LEN = 100
VICTIM_LENGTHS = (40, 100, 127, 1, 112)


@pytest.fixture(scope="module", params=["partitioned", "unsafe_shared_lru"])
def small_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # 16 pages, at most 128 tokens per request: the default prefix-cache budget is the other 8 pages
    factory = engine_factory(kv_cache_tokens=16 * PAGE, max_model_len=128, page_size=PAGE,
                             unsafe_shared_prefix_cache=request.param == "unsafe_shared_lru")
    with serve(tmp_path_factory.mktemp(f"i6-{request.param}"), factory=factory) as running:
        yield running


def _tokens(label: object, n: int) -> list[int]:
    out: list[int] = []
    counter = 0
    while len(out) < n:
        out.extend(5 + b % 250 for b in hashlib.sha256(repr((label, counter)).encode()).digest())
        counter += 1
    return out[:n]


def _cached(server: RunningServer, who: str, prompt: list[int]) -> int:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": 1, "temperature": 0.0}
    r = httpx.post(server.base_url + "/v1/completions", json=body, headers=server.headers(who), timeout=60)
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def _rounds(server: RunningServer) -> list[tuple[int, int]]:
    """One prime + victim + probe round per victim length; bob's cached tokens on each probe."""
    _cached(server, "alice", _tokens("warm-up", 20))  # both organizations already hold cache room
    probes = []
    for i, victim_len in enumerate(VICTIM_LENGTHS):
        older, newer = _tokens(("bob", i, 0), ATTACKER_LEN), _tokens(("bob", i, 1), ATTACKER_LEN)
        _cached(server, "bob", older)
        _cached(server, "bob", newer)
        _cached(server, "alice", _tokens(("alice", i), victim_len))
        probes.append((_cached(server, "bob", newer), _cached(server, "bob", older)))
    server.wait_idle()
    return probes


def test_cached_tokens_do_not_follow_another_orgs_prompt_length(small_server: RunningServer) -> None:
    probes = _rounds(small_server)
    if small_server.engine.config.unsafe_shared_prefix_cache:
        assert len(set(probes)) > 1, probes  # the old design: the victim's length shows
    else:
        assert probes == [(4 * PAGE, 0)] * len(VICTIM_LENGTHS)  # bob keeps his share, whatever alice sent
