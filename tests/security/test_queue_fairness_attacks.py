"""One organization must not take every request slot of the server (availability across tenants).

The engine admits ``max_num_seqs + max_queue_len`` requests in flight, for all tenants together.
A key without ``max_concurrent_requests`` could hold every one of them, and then every other
organization got 429 ``queue_full`` until it let go: a denial of service across tenants that costs
the attacker only open streams (per-key limits do not close it: an organization can hold many
keys). Now one organization holds at most ``--max-org-share`` of the slots (default half) once the
keys file has two or more organizations. The first test failed on the old code (acme got 429).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kvfence.errors import ConfigError
from kvfence.server.config import ServerConfig
from tests.server.conftest import RunningServer, engine_factory, serve

SLOTS = 4  # max_num_seqs 4 + max_queue_len 0: every admitted request runs at once


def _slow_engine() -> Any:
    engine = engine_factory(max_num_seqs=4)()
    execute = engine.runner.execute

    def slow(*args: Any) -> Any:
        time.sleep(0.01)  # the held requests must still be running when the other tenant arrives
        return execute(*args)

    engine.runner.execute = slow
    return engine


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serve(tmp_path_factory.mktemp("fairness"), factory=_slow_engine, max_queue_len=0) as running:
        yield running


def _hold(small: RunningServer, held: contextlib.ExitStack, who: str, count: int) -> list[int]:
    """Open ``count`` long streams for ``who`` and keep them open; their status codes."""
    body = {"prompt": "hold the line", "max_tokens": 900, "temperature": 0, "ignore_eos": True, "stream": True}
    codes = []
    for _ in range(count):
        r = held.enter_context(httpx.stream("POST", small.base_url + "/v1/completions", json=body,
                                            headers=small.headers(who), timeout=60))
        codes.append(r.status_code)  # the headers come once the request is admitted (or refused)
    return codes


def _one(small: RunningServer, who: str, **fields: Any) -> httpx.Response:
    return httpx.post(small.base_url + "/v1/completions", headers=small.headers(who), timeout=60,
                      json={"prompt": "my turn?", "max_tokens": 1, **fields})


def test_one_organization_cannot_take_every_slot(small: RunningServer) -> None:
    with contextlib.ExitStack() as held:
        codes = _hold(small, held, "bob", SLOTS)
        other = _one(small, "alice")
    small.wait_idle()
    assert codes == [200, 200, 429, 429], codes  # globex: its half of the four slots
    assert other.status_code == 200, f"globex holds every slot; acme got {other.status_code}: {other.text}"


def test_the_refusal_says_why_and_a_big_call_still_runs_alone(small: RunningServer) -> None:
    with contextlib.ExitStack() as held:
        _hold(small, held, "bob", 2)
        refused = _one(small, "bob")
    small.wait_idle()
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
    assert "share" in refused.json()["error"]["message"] and refused.headers.get("retry-after")
    # Three choices are more than an organization's share, but nothing else of carol's is in flight.
    assert _one(small, "carol", n=3, temperature=1.0).status_code == 200


def test_the_share_can_be_turned_off(small: RunningServer) -> None:
    serving = small.app.state.serving
    serving.config = dataclasses.replace(serving.config, max_org_share=1.0)
    try:
        with contextlib.ExitStack() as held:
            codes = _hold(small, held, "bob", SLOTS)
            other = _one(small, "alice")
    finally:
        serving.config = dataclasses.replace(serving.config, max_org_share=0.5)
    small.wait_idle()
    assert codes == [200] * SLOTS and other.status_code == 429  # the old behaviour, by choice


def test_a_share_outside_0_1_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--max-org-share"):
        ServerConfig(max_org_share=0.0)
    with pytest.raises(ConfigError, match="--max-org-share"):
        ServerConfig(max_org_share=1.5)
