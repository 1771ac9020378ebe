"""I2 by construction on both sides of disaggregated serving: the prefill worker's loop and the decode
worker's loop run the engine's step, whose runner zero-fills released pages before any forward pass,
page read or page write. Each side gets a request released the way a loop that forgot to scrub would
(through the scheduler alone), its pages poisoned; the probe on each forward pass looks at every free page.

Both workers run in this thread, driven by hand, so the release lands exactly mid-prompt / mid-answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.disagg.prefill_worker import PrefillWorker
from kvfence.engine.config import EngineConfig
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.disagg.helpers import KEY, make_engine
from tests.engine.pool_probe import PoolProbe


@pytest.fixture(scope="module")
def pair(model_dir: Path) -> Iterator[tuple[PrefillWorker, DisaggregatedEngine]]:
    worker = PrefillWorker(EngineConfig(model=str(model_dir), kv_cache_tokens=1024, max_model_len=512, num_threads=1,
                                        max_prefill_chunk=16), listen="tcp://127.0.0.1:*", key=KEY)
    stop = threading.Event()
    greeter = threading.Thread(target=worker.serve, args=(stop,), daemon=True)  # answers the HELLO only
    greeter.start()
    try:
        engine = make_engine(model_dir, worker.endpoint, timeout_s=60.0)
    finally:
        stop.set()
        greeter.join(30)
    try:
        yield worker, engine
    finally:
        engine.close()
        worker.close()


def _pump(worker: PrefillWorker, engine: DisaggregatedEngine) -> list[str]:
    """One turn of each loop; the ids of requests that finished on the decode side."""
    if worker.socket.poll(10):
        worker._drain()
    if worker.scheduler.has_unfinished():
        worker.step()
    return [o.request_id for o in engine.step() if o.finished]


def _finish(worker: PrefillWorker, engine: DisaggregatedEngine, rid: str) -> None:
    deadline = time.monotonic() + 120
    while rid not in _pump(worker, engine):
        assert time.monotonic() < deadline, f"{rid} did not finish"


def _prompt(seed: int, n: int) -> list[int]:
    return [(seed * 37 + i * 11) % 200 + 5 for i in range(n)]


def test_the_prefill_loop_never_runs_a_forward_over_released_pages(pair: tuple[PrefillWorker, DisaggregatedEngine]) -> None:
    worker, engine = pair
    probe = PoolProbe(worker.runner, worker.block_manager, worker.engine.free_pages)
    engine.add_request("long", _prompt(1, 100), SamplingParams(max_tokens=2), b"scope-long")
    deadline = time.monotonic() + 30
    while not worker.scheduler.running or worker.scheduler.running[0].num_computed_tokens == 0:
        _pump(worker, engine)
        assert time.monotonic() < deadline
    job = worker.scheduler.running[0]
    assert job.num_computed_tokens < job.num_prompt_tokens  # mid-prompt: 16-token chunks
    stranded = probe.strand(worker.scheduler, job.request_id)
    engine.abort_request("long")
    forwards = probe.forwards
    engine.add_request("next", _prompt(2, 40), SamplingParams(max_tokens=3), b"scope-next")
    _finish(worker, engine, "next")
    assert probe.forwards > forwards and set(stranded) <= probe.checked
    assert probe.stale == [] and worker.engine.pool_is_zero()


def test_the_decode_loop_never_runs_a_forward_over_released_pages(pair: tuple[PrefillWorker, DisaggregatedEngine]) -> None:
    worker, engine = pair
    probe = PoolProbe(engine.runner, engine.block_manager, engine.free_pages)
    engine.add_request("r1", _prompt(3, 30), SamplingParams(max_tokens=40, ignore_eos=True), b"scope-r1")
    deadline = time.monotonic() + 30
    while not (seq := engine.scheduler.get("r1")) or seq.num_completion_tokens < 6:  # its third page is its own, unsealed
        _pump(worker, engine)
        assert time.monotonic() < deadline
    stranded = probe.strand(engine.scheduler, "r1")
    engine._requests.pop("r1")
    forwards = probe.forwards
    engine.add_request("r2", _prompt(4, 30), SamplingParams(max_tokens=4, ignore_eos=True), b"scope-r2")
    _finish(worker, engine, "r2")
    assert probe.forwards > forwards and set(stranded) <= probe.checked
    assert probe.stale == [] and engine.pool_is_zero() and engine.block_manager.num_used_pages == 0
