"""Disaggregated serving: one tenant's poisoned request must not kill the other tenants' answers.

``kvfence serve`` retries a failed forward pass in halves and aborts only the request that fails
alone (tests/security/test_fault_isolation.py). Before this, both sides of ``kvfence disagg`` aborted
the whole batch: the prefill worker sent an ABORT for every request of the failed step, and the decode
worker aborted every request of the batch and raised out of ``step()`` (the server then ended every
in-flight stream). These tests failed on that code (the victims ended with ``sender_abort``; the decode
step raised). Now both sides use the engine's fault isolation: the culprit ends with an error and no
answer, its pages are released and zero-filled (I2) on both sides, and every other request finishes
with exactly the tokens of an undisturbed run, seeded sampling included.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvfence.disagg.engine import DisaggregatedEngine, DisaggRequestOutput
from kvfence.disagg.prefill_worker import PrefillWorker
from kvfence.engine.config import EngineConfig
from kvfence.engine.core.fault_isolation import retry_budget
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.disagg.helpers import KEY, drive, make_engine, serve_disaggregated

PREFILL_POISON = [241, 242, 243, 244]  # a prompt holding this fails the prefill forward pass
DECODE_POISON = [245, 246, 247, 248]  # ... and this one every decode forward pass


def _contains(haystack: list[int], needle: list[int]) -> bool:
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


class _Poisoned:
    """Wraps a model runner: a batch whose prompts hold ``poison`` raises, as a kernel fault would."""

    def __init__(self, runner: Any, poison: list[int]) -> None:
        self.poison = poison
        self.delay_s = 0.0  # each pass takes at least this long (keeps HTTP victims in flight)
        self.batch_sizes_with_poison: list[int] = []
        self._execute = runner.execute
        runner.execute = self

    def __call__(self, items: list[Any], *args: Any) -> Any:
        time.sleep(self.delay_s)
        if any(_contains(it.seq.prompt_token_ids, self.poison) for it in items):
            self.batch_sizes_with_poison.append(len(items))
            raise RuntimeError("test: kernel failure on this request's input")
        return self._execute(items, *args)


class _Worker:
    """An in-process prefill worker whose loop can be paused, so requests queue up and batch together."""

    def __init__(self, model_dir: Path) -> None:
        self.worker = PrefillWorker(EngineConfig(model=str(model_dir), kv_cache_tokens=1024, max_model_len=512,
                                                 num_threads=1), listen="tcp://127.0.0.1:*", key=KEY)
        self.faults = _Poisoned(self.worker.runner, PREFILL_POISON)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.resume()

    def pause(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def resume(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.worker.serve, args=(self._stop,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.pause()
        self.worker.close()


@pytest.fixture(scope="module")
def pair(default_model_dir: Path) -> Iterator[tuple[_Worker, DisaggregatedEngine, _Poisoned]]:
    worker = _Worker(default_model_dir)
    engine = make_engine(default_model_dir, worker.worker.endpoint, timeout_s=60.0)
    faults = _Poisoned(engine.runner, DECODE_POISON)
    try:
        yield worker, engine, faults
    finally:
        engine.close()
        worker.close()


def _prompt(seed: int, n: int = 30) -> list[int]:
    return [(seed * 37 + i * 11) % 200 + 5 for i in range(n)]  # never a poison token (>= 241)


VICTIMS = {  # name: (prompt seed, sampling)
    "alice": (1, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)),
    "carol": (2, SamplingParams(max_tokens=12, temperature=1.0, seed=1234, ignore_eos=True)),
    "dave": (3, SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=7, ignore_eos=True, logprobs=2)),
}


def _run(worker: _Worker, engine: DisaggregatedEngine, tag: str,
         extra: dict[str, list[int]] | None = None) -> dict[str, DisaggRequestOutput]:
    """Every request submitted while the prefill loop is paused (one batch there), then driven to the end.
    Scope keys differ per run, so no run reads another's prefix cache."""
    worker.pause()
    ids = []
    for name, (seed, params) in VICTIMS.items():
        engine.add_request(f"{tag}-{name}", _prompt(seed), params, f"{tag}-{name}".encode())
        ids.append(f"{tag}-{name}")
    for name, prompt in (extra or {}).items():
        engine.add_request(f"{tag}-{name}", prompt, SamplingParams(max_tokens=12, ignore_eos=True),
                           f"{tag}-{name}".encode())
        ids.append(f"{tag}-{name}")
    time.sleep(0.3)  # every SUBMIT is in the worker's socket before its loop runs again
    worker.resume()
    outs = drive(engine, ids, timeout_s=120)
    last = {rid.rsplit("-", 1)[1]: o[-1] for rid, o in outs.items()}
    assert all(isinstance(o, DisaggRequestOutput) for o in last.values())
    return last  # type: ignore[return-value]


def _assert_victims_unchanged(got: dict[str, DisaggRequestOutput], undisturbed: dict[str, DisaggRequestOutput]) -> None:
    for name in VICTIMS:
        assert got[name].finish_reason == "length", f"{name} was cut by another tenant's fault: {got[name].error}"
        assert got[name].token_ids == undisturbed[name].token_ids, f"{name}'s answer changed"
        # A batch of another size rounds differently in the last bits; the tokens above are exact.
        got_lp, base_lp = got[name].logprobs or [], undisturbed[name].logprobs or []
        assert [sorted(d) for d in got_lp] == [sorted(d) for d in base_lp]
        assert all(d[t] == pytest.approx(b[t], abs=1e-4) for d, b in zip(got_lp, base_lp, strict=True) for t in d)


def _assert_scrubbed(worker: _Worker, engine: DisaggregatedEngine) -> None:
    deadline = time.monotonic() + 10
    while worker.worker._jobs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not worker.worker._jobs
    assert worker.worker.block_manager.num_used_pages == 0 or worker.worker.engine.pool_is_zero()
    assert worker.worker.engine.pool_is_zero()  # the prefill side's free pages hold no KV (I2)
    assert engine.block_manager.num_used_pages == 0 and engine.pool_is_zero()  # nor the decode side's


def test_a_prompt_that_fails_the_prefill_pass_is_aborted_alone(pair: tuple[_Worker, DisaggregatedEngine, _Poisoned]) -> None:
    worker, engine, _ = pair
    undisturbed = _run(worker, engine, "p-base")
    calls_before = len(worker.faults.batch_sizes_with_poison)
    got = _run(worker, engine, "p-attack", {"bob": [9, 10, *PREFILL_POISON, 11]})
    sizes = worker.faults.batch_sizes_with_poison[calls_before:]
    assert sizes and max(sizes) > 1, "the poison never shared a batch with the victims"
    bob = got["bob"]
    assert bob.finish_reason == "abort" and bob.token_ids == [] and bob.text == ""
    assert bob.error_reason == "sender_abort" and "internal error in the prefill worker" in (bob.error or "")
    _assert_victims_unchanged(got, undisturbed)
    _assert_scrubbed(worker, engine)


def test_a_request_that_fails_the_decode_pass_is_aborted_alone(pair: tuple[_Worker, DisaggregatedEngine, _Poisoned]) -> None:
    worker, engine, faults = pair
    undisturbed = _run(worker, engine, "d-base")
    engine.take_failed_requests()
    calls_before = len(faults.batch_sizes_with_poison)
    got = _run(worker, engine, "d-attack", {"bob": [9, 10, *DECODE_POISON, 11]})
    sizes = faults.batch_sizes_with_poison[calls_before:]
    assert sizes and max(sizes) > 1, "the poison never shared a decode batch with the victims"
    bob = got["bob"]
    assert bob.finish_reason == "abort" and bob.token_ids == [] and bob.text == ""
    assert bob.error_reason == "internal" and "decode forward pass failed" in (bob.error or "")
    failed = engine.take_failed_requests()
    assert [rid for rid, _ in failed] == ["d-attack-bob"]
    assert isinstance(failed[0][1], RuntimeError)
    _assert_victims_unchanged(got, undisturbed)
    _assert_scrubbed(worker, engine)


def test_a_broken_decode_device_still_ends_every_request(pair: tuple[_Worker, DisaggregatedEngine, _Poisoned]) -> None:
    """Everything fails: a bounded number of passes, every request aborted, and a step whose whole
    batch fails raises (the server ends every stream); the pool is clean and serves again afterwards."""
    worker, engine, faults = pair
    real = faults._execute
    calls = {"n": 0}

    def broken(items: list[Any], *args: Any) -> Any:
        calls["n"] += 1
        raise RuntimeError("test: the device is gone")

    faults._execute = broken
    names = [f"broken-{n}" for n in sorted(VICTIMS)]
    failed: list[str] = []
    ended: dict[str, Any] = {}
    raises = 0
    try:
        worker.pause()  # one prefill batch, so the handoffs arrive together (usually one decode batch)
        for name, (seed, params) in VICTIMS.items():
            engine.add_request(f"broken-{name}", _prompt(seed), params, f"broken-{name}".encode())
        time.sleep(0.3)
        worker.resume()
        deadline = time.monotonic() + 60
        # Handoffs may still land in different steps: a step whose whole batch (of two or more)
        # fails raises; a request failing alone is a culprit and is aborted without a raise.
        while sorted(failed) != names and time.monotonic() < deadline:
            try:
                ended.update({o.request_id: o for o in engine.step() if o.finished})
            except RuntimeError as exc:
                assert "device is gone" in str(exc)
                raises += 1
            failed.extend(rid for rid, _ in engine.take_failed_requests())
    finally:
        faults._execute = real
    assert sorted(failed) == names
    # Bounded: each failed step aborts at least one request and makes at most 1 + budget passes.
    assert calls["n"] <= len(VICTIMS) * (1 + retry_budget(len(VICTIMS)))
    # Engine-API callers see every request end: the outputs of a raising step are not lost.
    deadline = time.monotonic() + 10
    while engine.has_unfinished_requests() and time.monotonic() < deadline:
        ended.update({o.request_id: o for o in engine.step() if o.finished})
    assert sorted(ended) == names
    assert all(o.finish_reason == "abort" and o.token_ids == [] for o in ended.values())
    assert not engine.has_unfinished_requests() or not engine.scheduler.has_unfinished()
    assert engine.block_manager.num_used_pages == 0 and engine.pool_is_zero()
    again = _run(worker, engine, "after")
    assert all(o.finish_reason == "length" for o in again.values())


# -- through `kvfence serve` over the disaggregated engine -------------------------------------------

def _stream(base: str, prompt: list[int], seed: int | None, results: dict[str, list[str]], name: str,
            started: threading.Event) -> None:
    body = {"prompt": prompt, "max_tokens": 60, "ignore_eos": True, "stream": True,
            "temperature": 0.0 if seed is None else 1.0, "seed": seed}
    events: list[str] = []
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                started.set()
    started.set()
    results[name] = events


def _text(events: list[str]) -> str:
    return "".join(c["text"] for e in events if e != "[DONE]" for c in json.loads(e).get("choices", []))


HTTP_VICTIMS = {"alice": (11, None), "carol": (12, 4321)}


def _http_victims(base: str, attack: Any) -> dict[str, list[str]]:
    results: dict[str, list[str]] = {}
    started = {name: threading.Event() for name in HTTP_VICTIMS}
    threads = [threading.Thread(target=_stream, args=(base, _prompt(seed), s, results, name, started[name]))
               for name, (seed, s) in HTTP_VICTIMS.items()]
    for t in threads:
        t.start()
    attack(started)
    for t in threads:
        t.join(120)
    return results


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_over_http_the_culprit_gets_an_error_and_the_others_their_answers(
        default_model_dir: Path, pair: tuple[_Worker, DisaggregatedEngine, _Poisoned], side: str) -> None:
    worker, _, _ = pair
    with serve_disaggregated(default_model_dir, worker.worker.endpoint, timeout_s=60.0) as (base, engines):
        faults = _Poisoned(engines[0].runner, DECODE_POISON)
        faults.delay_s = 0.01
        undisturbed = {n: _text(e) for n, e in _http_victims(base, lambda started: None).items()}
        poison = [9, 10, *(PREFILL_POISON if side == "prefill" else DECODE_POISON), 11]
        answers: list[httpx.Response] = []

        def handoffs_pending(n: int) -> None:  # sent to the paused worker: a busy machine may take a while
            deadline = time.monotonic() + 60
            while engines[0].stats().num_handoffs_pending < n and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.1)  # the SUBMIT frames reach the worker's socket

        def attack(started: dict[str, threading.Event]) -> None:
            if side == "prefill":  # every prompt reaches the worker while its loop is paused: one batch
                handoffs_pending(len(HTTP_VICTIMS))
            else:  # the victims decode when the poison joins their batch
                assert all(ev.wait(60) for ev in started.values())
            poisoned = threading.Thread(target=lambda: answers.append(httpx.post(
                base + "/v1/completions", json={"prompt": poison, "max_tokens": 4}, timeout=120)))
            poisoned.start()
            if side == "prefill":
                handoffs_pending(len(HTTP_VICTIMS) + 1)
                worker.resume()
            poisoned.join(120)

        sizes = (worker.faults if side == "prefill" else faults).batch_sizes_with_poison
        before = len(sizes)
        if side == "prefill":
            worker.pause()
        attacked = _http_victims(base, attack)
        (answer,) = answers
        assert answer.status_code == 500, answer.text
        error = answer.json()["error"]
        assert error["type"] == "server_error" and set(error) == {"message", "type", "param", "code"}
        assert "Traceback" not in answer.text and "kernel failure" not in answer.text
        for name, events in attacked.items():
            assert events[-1] == "[DONE]", f"{name}'s stream was cut by another tenant's fault: {events[-1]}"
            assert _text(events) == undisturbed[name], f"{name}'s answer changed"
        deadline = time.monotonic() + 10
        while engines[0].stats().num_used_pages and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engines[0].stats().num_used_pages == 0
        assert sizes[before:] and max(sizes[before:]) > 1, "the poison never shared a batch with the victims"
