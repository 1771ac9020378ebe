"""What leaves the server besides answers: /metrics, logs, error bodies (DESIGN: no prompt text,
salts or keys; an error never echoes another tenant's data), and what a 5xx leaves in the pool.

Alice sends canary strings as prompt and salt; bob, in another organisation, provokes every error
he can, including an engine fault in the very batch that carries alice's prompt. Nothing bob gets
back, nothing /metrics shows to anyone, and nothing the server logs carries alice's canaries or
anybody's key; after the fault no page is mapped and every free page is zero.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kvfence.server.auth.keys import hash_secret
from tests.server.conftest import RunningServer, engine_factory, serve

PROMPT_CANARY = "CANARY7f3a merger with Initech closes Friday"
SALT_CANARY = "SALTCANARY91b2"
CRASH_MARK = "<<bob-crashes-the-batch>>"


def _crashing_engine() -> Any:
    """An engine whose forward pass fails, as a device fault would, for any batch holding bob's marker."""
    engine = engine_factory()()
    crash = engine.tokenizer.encode(CRASH_MARK, add_special_tokens=False)
    real_execute = engine.runner.execute

    def execute(items: list[Any], *args: Any, **kwargs: Any) -> Any:
        for it in items:
            ids = it.seq.token_ids
            if any(ids[i:i + len(crash)] == crash for i in range(len(ids) - len(crash) + 1)):
                raise RuntimeError(f"CUDA error: an illegal memory access ({len(items)} sequences)")
        return real_execute(items, *args, **kwargs)

    engine.runner.execute = execute
    return engine


@pytest.fixture(scope="module")
def crashing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serve(tmp_path_factory.mktemp("telemetry"), factory=_crashing_engine) as running:
        yield running


def _post(server: RunningServer, who: str, path: str, body: Any) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, headers=server.headers(who), timeout=60)


def _secrets_of(server: RunningServer) -> list[str]:
    keys = list(server.keys.values())
    return [PROMPT_CANARY, SALT_CANARY, *keys, *(hash_secret(k) for k in keys),
            server.scope_key("alice").hex(), server.scope_key("alice", SALT_CANARY).hex()]


def test_errors_metrics_and_logs_carry_no_other_tenants_data(crashing: RunningServer,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    alice = {"prompt": PROMPT_CANARY, "max_tokens": 8, "ignore_eos": True, "cache_salt": SALT_CANARY}
    assert _post(crashing, "alice", "/v1/completions", alice).status_code == 200

    # Alice streams a long answer while bob's request fails the batch both are in.
    alice_events: list[str] = []

    def stream_alice() -> None:
        body = {**alice, "max_tokens": 300, "stream": True}
        with httpx.stream("POST", crashing.base_url + "/v1/completions", json=body, headers=crashing.headers("alice"),
                          timeout=60) as r:
            if r.status_code != 200:  # failed with the batch before its first event: an error, fine
                alice_events.append(f"status {r.status_code}: {r.read().decode()}")
                return
            alice_events.extend(line for line in r.iter_lines() if line.startswith("data:"))

    t = threading.Thread(target=stream_alice)
    t.start()
    bob_errors = [
        _post(crashing, "bob", "/v1/completions", {"prompt": f"hi {CRASH_MARK}", "max_tokens": 4}),
        _post(crashing, "bob", "/v1/completions", {"prompt": [1, 2, 10**6], "max_tokens": 4}),
        _post(crashing, "bob", "/v1/completions", {"prompt": PROMPT_CANARY[:10], "max_tokens": 10**7}),
        _post(crashing, "bob", "/v1/completions", {"prompt": "x", "model": "alice-private-model"}),
        _post(crashing, "bob", "/v1/chat/completions", {"messages": [{"role": "nobody", "content": 3}]}),
        httpx.post(crashing.base_url + "/v1/completions", content=b"{not json", headers=crashing.headers("bob")),
        httpx.post(crashing.base_url + "/v1/completions", json={"prompt": "x"},
                   headers={"Authorization": "Bearer " + crashing.keys["alice"][:-2] + "xx"}),
    ]
    t.join(60)
    assert bob_errors[0].status_code == 500
    assert all(400 <= r.status_code < 600 for r in bob_errors), [r.status_code for r in bob_errors]
    crashing.wait_idle()

    leaked = [(r.status_code, s) for r in bob_errors for s in (PROMPT_CANARY, SALT_CANARY, "Initech") if s in r.text]
    assert leaked == [], "an error body carries another tenant's data"
    assert alice_events and not any(CRASH_MARK in e for e in alice_events)
    # In bob's failing batch or not, alice's stream ends complete or with an error, never cut short as success.
    assert alice_events[-1] == "data: [DONE]" or '"error"' in alice_events[-1], alice_events[-1]

    metrics = httpx.get(crashing.base_url + "/metrics").text  # readable without a key
    assert [s for s in _secrets_of(crashing) if s in metrics] == []
    logged = "\n".join(r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "") for r in caplog.records)
    assert [s for s in _secrets_of(crashing) if s in logged] == []

    # The 5xx left nothing mapped and nothing stale.
    stats = crashing.wait_idle()
    assert stats.num_used_pages == 0
    assert crashing.engine.pool_is_zero()
