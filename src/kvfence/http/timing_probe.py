"""Where a request's time goes inside the gateway, for diagnosing latency tails (off by default).

``KVFENCE_GATEWAY_TIMING=FILE`` turns it on: the gateway then records, per streamed request, the
moments (``time.perf_counter``: CLOCK_MONOTONIC, so comparable with other processes on the machine)

    parsed    the server has parsed the request line (the request's bytes were read)
    entered   the request path started (the server's task for it ran)
    sent      the request went to the backend
    headers   the backend's status and headers were in
    first     the first piece of the answer was handed to the server for the client
    ended     the stream ended (its bookkeeping began: upstream closed, limits released, audit row)

and, for the whole run, every event-loop stall (a 1 ms timer that fired over 2 ms late: the loop
was busy, or the process was not on a core; the loop thread's CPU time over it tells which), every garbage collection (generation, wall and CPU
time, objects examined, garbage found) and every batch of the audit-log writer thread. It is written to FILE as JSON when the server shuts down (by each worker process: see :func:`write`). ``bench/gateway.py --timing DIR`` joins it
with the client's and the backend's timestamps of the same requests (by request id).

When the variable is unset nothing is patched and :func:`mark` is one global test per call site.
A diagnostic, not a metric: the 1 ms timer costs the gateway CPU and wake-ups of its own.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from collections.abc import Awaitable
from typing import Any

from starlette.types import Message, Scope, Send

__all__ = ["ENV_VAR", "enabled", "install", "mark", "start_loop_sampler", "watch_send", "write", "writer_busy"]

ENV_VAR = "KVFENCE_GATEWAY_TIMING"
_SAMPLE_S = 0.001
_STALL_S = 0.002  # uvloop's timers round to whole milliseconds: up to ~1 ms late is no stall

_path = os.environ.get(ENV_VAR) or None
_requests: dict[str, dict[str, float]] = {}
# (when the timer should have fired, how late it was, the loop thread's CPU time since the tick before:
# near the wall time when the loop was busy, far below it when the process waited for a core)
_stalls: list[tuple[float, float, float]] = []
# (start, duration, CPU time, generation, objects it examined, of which garbage)
_collections: list[tuple[float, float, float, int, int, int]] = []
_gc_started = (0.0, 0.0, 0)
_writer_busy: list[tuple[float, float]] = []  # (start, end) of each audit-log batch on its thread


def enabled() -> bool:
    return _path is not None


def mark(request_id: str, event: str, when: float | None = None) -> None:
    """Record that ``event`` happened to ``request_id`` now (or at ``when``)."""
    if _path is None:
        return
    _requests.setdefault(request_id, {})[event] = time.perf_counter() if when is None else when


def writer_busy(started: float) -> None:
    """The audit-log writer thread ran one batch from ``started`` until now (it holds the GIL for
    part of that: time the event loop may wait for)."""
    if _path is not None:
        _writer_busy.append((started, time.perf_counter()))


def watch_send(scope: Scope, send: Send) -> Send:
    """``send`` that also marks ``parsed`` (from the scope) and ``first`` (the first body bytes),
    under the request id the answer's headers carry."""
    request_id: str | None = None

    def on_message(message: Message) -> None:
        nonlocal request_id
        if message["type"] == "http.response.start":
            for name, value in message.get("headers", ()):
                if name.lower() == b"x-request-id":
                    request_id = value.decode("latin-1")
                    parsed = scope.get("kvfence.parsed")
                    if parsed is not None:
                        mark(request_id, "parsed", parsed)
        elif request_id is not None and message.get("body"):
            mark(request_id, "first")
            request_id = None

    def sending(message: Message) -> Awaitable[None]:
        on_message(message)
        return send(message)

    return sending


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    global _gc_started
    generation = int(info.get("generation", 0))
    if phase == "start":
        examined = sum(len(gc.get_objects(g)) for g in range(generation + 1))
        _gc_started = (time.perf_counter(), time.thread_time(), examined)
    else:
        now, cpu = time.perf_counter(), time.thread_time()
        # wall time includes time off the core; CPU time is the collection's own work
        started, cpu_started, examined = _gc_started
        _collections.append((started, now - started, cpu - cpu_started, generation, examined,
                             int(info.get("collected", 0))))


def install() -> None:
    """Watch the collector (the server stamps each request's scope itself)."""
    if _path is None:
        return
    gc.callbacks.append(_on_gc)


def start_loop_sampler() -> None:
    """Fire a timer every millisecond on the running loop and note each one that fired late."""
    if _path is None:
        return
    loop = asyncio.get_running_loop()

    def tick(due: float, cpu_before: float) -> None:
        # perf_counter, not loop.time(): uvloop's clock moves in whole milliseconds
        now, cpu = time.perf_counter(), time.thread_time()
        if now - due > _STALL_S:
            _stalls.append((due, now - due, cpu - cpu_before))
        loop.call_later(_SAMPLE_S, tick, now + _SAMPLE_S, cpu)

    loop.call_later(_SAMPLE_S, tick, time.perf_counter() + _SAMPLE_S, time.thread_time())


def write() -> None:
    """Write what was recorded to the file named by the environment variable."""
    if _path is None:
        return
    record = {"requests": _requests, "stalls": _stalls, "collections": _collections, "writer_busy": _writer_busy,
              "tracked_objects": len(gc.get_objects()), "frozen_objects": gc.get_freeze_count()}
    # Several worker processes share the variable: the first to finish takes FILE, the others FILE.PID
    # (created exclusively, so no worker overwrites another's record).
    text = json.dumps(record)
    try:
        with open(_path, "x") as out:
            out.write(text)
    except FileExistsError:
        with open(f"{_path}.{os.getpid()}", "w") as out:
            out.write(text)
