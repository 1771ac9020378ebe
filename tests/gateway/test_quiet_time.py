"""Deferred bookkeeping and collection passes (``gateway/quiet_time.py``): they wait while requests keep
starting, never longer than the bound, and run at once when asked (``/metrics``, shutdown)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import time

import pytest

from kvfence.gateway.records.trace import RequestTrace
from kvfence.gateway.transport.quiet_time import QuietTime


def test_deferred_work_waits_for_a_quiet_moment() -> None:
    # Checked against the moments busy() was really called, so a loaded machine (a sleep that
    # overshoots the quiet time) cannot fail it: the work must never run within quiet_s of a busy().
    async def scenario() -> tuple[list[float], list[float]]:
        quiet = QuietTime(quiet_s=0.05, max_delay_s=5.0)
        ran: list[float] = []
        busy_at: list[float] = []
        quiet.defer(lambda: ran.append(time.perf_counter()))
        busy_until = time.perf_counter() + 0.3
        while time.perf_counter() < busy_until:  # requests keep starting every 5 ms
            quiet.busy()
            busy_at.append(time.perf_counter())
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.3)
        return ran, busy_at

    ran, busy_at = asyncio.run(scenario())
    assert len(ran) == 1
    before = [t for t in busy_at if t <= ran[0]]
    assert ran[0] - before[-1] >= 0.05 - 0.002  # a quiet moment: no request started for quiet_s
    gaps = [b - a for a, b in itertools.pairwise(busy_at)]
    if max(gaps) < 0.04:  # the machine kept up: then it waited for the end of the burst
        assert ran[0] >= busy_at[-1]


def test_nothing_waits_longer_than_the_bound_on_a_loop_that_is_never_quiet() -> None:
    async def scenario() -> tuple[list[float], float, float]:
        quiet = QuietTime(quiet_s=0.05, max_delay_s=0.1)
        ran: list[float] = []
        deferred_at = time.perf_counter()
        quiet.defer(lambda: ran.append(time.perf_counter()))
        while time.perf_counter() - deferred_at < 1.5:
            quiet.busy()
            await asyncio.sleep(0.002)
        return ran, deferred_at, time.perf_counter()

    ran, _deferred_at, busy_end = asyncio.run(scenario())
    assert len(ran) == 1 and ran[0] < busy_end  # ran while requests kept starting: the bound, not quiet


def test_drain_runs_everything_at_once_and_a_failure_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> list[int]:
        quiet = QuietTime(quiet_s=10.0, max_delay_s=10.0)
        done: list[int] = []
        quiet.defer(done.append, 1)
        quiet.defer(lambda: 1 / 0)
        quiet.defer(done.append, 2)
        quiet.drain()  # as /metrics does before it reads the counters
        return done

    with caplog.at_level(logging.ERROR, logger="kvfence.gateway"):
        done = asyncio.run(scenario())
    assert done == [1, 2]
    assert "deferred gateway bookkeeping failed" in caplog.text


def test_managed_collection_passes_run_in_quiet_time_and_settings_come_back() -> None:
    before = gc.get_threshold()

    async def scenario() -> tuple[tuple[int, int, int], int, int]:
        quiet = QuietTime(quiet_s=0.01, max_delay_s=1.0)
        quiet.manage_gc()
        during = gc.get_threshold()
        young = [[i] for i in range(5000)]  # young objects (alive), more than a pass is due at
        quiet.busy()
        pending = gc.get_count()[0]
        await asyncio.sleep(0.1)
        after_pass = gc.get_count()[0]  # a pass moves them on: the young count starts again
        quiet.close()
        del young
        return during, pending, after_pass

    gc.collect()
    during, pending, after_pass = asyncio.run(scenario())
    assert during[0] > before[0]  # the automatic collector is only a safety net meanwhile
    assert pending > 700 and after_pass < pending  # a quiet-time pass ran
    assert gc.get_threshold() == before


def test_a_deferred_audit_row_keeps_the_latency_of_the_moment_the_stream_ended() -> None:
    trace = RequestTrace(request_id="gwreq-1", endpoint="chat", started=time.perf_counter() - 0.5)
    ended = time.perf_counter()
    time.sleep(0.05)  # written later, as a deferred row is
    row = trace.decision(200, "ok", None, ended=ended)
    assert 499 <= row.latency_ms <= 501 + 1


def test_work_deferred_on_a_loop_that_stopped_runs_on_the_next_one() -> None:
    # An app served by one event loop after another (test clients do this): a check left on the first
    # loop never fires, so the second loop must take the work over.
    quiet = QuietTime(quiet_s=0.01, max_delay_s=1.0)
    ran: list[str] = []
    first = asyncio.new_event_loop()
    try:
        async def on_first() -> None:
            quiet.defer(ran.append, "first")

        first.run_until_complete(on_first())  # returns before the check is due: the loop stops

        async def on_second() -> None:
            quiet.defer(ran.append, "second")
            await asyncio.sleep(0.1)

        asyncio.run(on_second())
    finally:
        first.close()
    assert ran == ["first", "second"]
