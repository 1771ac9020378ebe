"""The timing probe (KVFENCE_GATEWAY_TIMING): off by default; when on, stamps by request id."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from pathlib import Path
from typing import Any

import pytest

from kvfence.http import timing_probe


def test_off_by_default_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing_probe, "_path", None)
    monkeypatch.setattr(timing_probe, "_requests", {})
    timing_probe.mark("r1", "sent")
    assert not timing_probe.enabled()
    assert timing_probe._requests == {}


def test_stamps_are_joined_by_request_id_and_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "timing.json"
    monkeypatch.setattr(timing_probe, "_path", str(out))
    for name in ("_requests", "_stalls", "_collections", "_writer_busy"):
        monkeypatch.setattr(timing_probe, name, {} if name == "_requests" else [])
    sent: list[dict[str, Any]] = []
    first_seen: list[float] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def answer() -> None:
        wrapped = timing_probe.watch_send({"kvfence.parsed": 1.5}, send)
        await wrapped({"type": "http.response.start", "status": 200, "headers": [(b"x-request-id", b"gwreq-1")]})
        await wrapped({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        first_seen.append(timing_probe._requests["gwreq-1"]["first"])
        await wrapped({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": False})

    timing_probe.mark("gwreq-1", "sent", 2.0)
    asyncio.run(answer())
    gc.callbacks.append(timing_probe._on_gc)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(timing_probe._on_gc)
    timing_probe.writer_busy(3.0)
    timing_probe.write()

    assert len(sent) == 3  # every message still reaches the server
    data = json.loads(out.read_text())
    stamps = data["requests"]["gwreq-1"]
    assert stamps["parsed"] == 1.5 and stamps["sent"] == 2.0
    assert stamps["first"] == first_seen[0]  # the first body piece, not a later one
    (_started, wall, cpu, generation, examined, garbage), = data["collections"]
    assert generation == 2 and wall >= 0 and cpu >= 0 and examined > 0 and garbage >= 0
    assert data["writer_busy"][0][0] == 3.0


def test_worker_processes_each_write_their_own_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # `--workers N` runs N processes with the same variable: the second to finish must not overwrite
    # the first's record (the bench merges FILE and every FILE.PID).
    out = tmp_path / "timing.json"
    monkeypatch.setattr(timing_probe, "_path", str(out))
    for name in ("_stalls", "_collections", "_writer_busy"):
        monkeypatch.setattr(timing_probe, name, [])
    monkeypatch.setattr(timing_probe, "_requests", {"gwreq-a": {"sent": 1.0}})
    timing_probe.write()
    monkeypatch.setattr(timing_probe, "_requests", {"gwreq-b": {"sent": 2.0}})
    monkeypatch.setattr(timing_probe.os, "getpid", lambda: 4242)
    timing_probe.write()
    assert json.loads(out.read_text())["requests"] == {"gwreq-a": {"sent": 1.0}}
    assert json.loads((tmp_path / "timing.json.4242").read_text())["requests"] == {"gwreq-b": {"sent": 2.0}}


def test_a_stall_records_the_loop_threads_cpu_time_over_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # A busy loop (CPU time near the wall time) and a process waiting for a core (far below) read the
    # same as late timers; the CPU time tells them apart.
    monkeypatch.setattr(timing_probe, "_path", "unused")
    monkeypatch.setattr(timing_probe, "_stalls", [])

    async def busy() -> None:
        timing_probe.start_loop_sampler()
        await asyncio.sleep(0.01)
        end = time.thread_time() + 0.03
        while time.thread_time() < end:  # the loop spins 30 ms of CPU: its 1 ms timer fires late
            pass
        await asyncio.sleep(0.01)

    asyncio.run(busy())
    late = max(timing_probe._stalls, key=lambda s: s[2])
    # the stall's CPU time holds the spin (a loaded machine only adds wall time)
    assert late[2] >= 0.025 and late[1] >= late[2] - 0.005
