"""Failures inside the engine are never answered as success.

The real engine runs in paranoid mode (``verify_isolation``); its I1 check and its forward pass are
wrapped so that a prompt carrying a marker string trips them, as a corrupted block table or a
failing kernel would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kvfence.errors import IsolationViolation
from tests.server.conftest import RunningServer, engine_factory, serve

VIOLATION_MARK = "<<corrupted-block-table>>"
CRASH_MARK = "<<kernel-failure>>"


def _contains(haystack: list[int], needle: list[int]) -> bool:
    n = len(needle)
    return any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


def _faulty_engine() -> Any:
    engine = engine_factory(verify_isolation=True)()
    violation = engine.tokenizer.encode(VIOLATION_MARK, add_special_tokens=False)
    crash = engine.tokenizer.encode(CRASH_MARK, add_special_tokens=False)
    real_verify, real_execute = engine.block_manager.verify, engine.runner.execute

    def verify(seq: Any) -> None:
        if _contains(seq.token_ids, violation):
            raise IsolationViolation(f"test: request {seq.request_id} maps a page of another scope")
        real_verify(seq)

    def execute(items: list[Any]) -> Any:
        if any(_contains(it.seq.token_ids, crash) for it in items):
            raise RuntimeError("test: simulated kernel failure")
        return real_execute(items)

    engine.block_manager.verify = verify
    engine.runner.execute = execute
    return engine


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serve(tmp_path_factory.mktemp("faulty"), factory=_faulty_engine) as running:
        yield running


def _completion(server: RunningServer, prompt: str, **extra: Any) -> httpx.Response:
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True, **extra}
    return httpx.post(server.base_url + "/v1/completions", json=body, headers=server.headers("alice"), timeout=60)


def _ok(server: RunningServer) -> None:
    r = _completion(server, "all good")
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"


def test_isolation_violation_is_an_error_and_an_incident(faulty: RunningServer) -> None:
    baseline = faulty.wait_idle().num_used_pages
    r = _completion(faulty, f"hello {VIOLATION_MARK} world")
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["code"] == "request_aborted" and error["type"] == "server_error"
    assert "choices" not in r.json()

    with httpx.stream("POST", faulty.base_url + "/v1/completions", headers=faulty.headers("alice"), timeout=60,
                      json={"prompt": f"{VIOLATION_MARK}!", "max_tokens": 4, "stream": True}) as stream:
        events = [line[6:] for line in stream.iter_lines() if line.startswith("data: ")]
    assert "[DONE]" not in events, "a failed stream must not look complete"
    assert json.loads(events[-1])["error"]["code"] == "request_aborted"

    metrics = httpx.get(faulty.base_url + "/metrics").text
    assert "kvfence_isolation_incidents_total 2.0" in metrics
    assert faulty.wait_idle().num_used_pages == baseline
    assert faulty.engine.pool_is_zero()
    _ok(faulty)


def test_engine_step_failure_is_a_500_and_the_server_recovers(faulty: RunningServer) -> None:
    r = _completion(faulty, f"please {CRASH_MARK}")
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "internal_error"
    assert "Traceback" not in r.text
    assert httpx.get(faulty.base_url + "/health").status_code == 200
    _ok(faulty)
