"""Added latency of `kvfence gateway` against calling the backend directly, measured in the same run.

    .venv/bin/python bench/gateway.py                       # all four scenarios below
    .venv/bin/python bench/gateway.py --scenario paced:100  # one of them
    .venv/bin/python bench/gateway.py --json
    .venv/bin/python bench/gateway.py --scenario paced:100 --endpoint chat --endpoint responses \
        --endpoint messages --endpoint embeddings           # the other APIs next to chat, same run

A default run (four scenarios) takes 3-4 minutes; ``--before-src`` adds a fifth run per scenario.
A/B of a change, in one run: ``git archive HEAD src | tar -x -C /tmp/before`` then ``--before-src
/tmp/before/src`` ('before' runs that tree's gateway; ``--before-server uvicorn`` or ``lean`` picks its
HTTP server, for trees from before kvfence had one server, kvfence.http), and ``--gateway-workers 2
--before-workers 1`` one gateway process against two worker processes ('before' is the one-process run).
To split a gateway's CPU into per-chunk and per-request parts, run ``--scenario paced:100`` with two
``--chunks`` values: the slope is the per-chunk cost, the intercept the per-request one. To see where
it goes, ``--profile-gateway FILE`` runs the gateway under cProfile (CPU clock; read FILE with
``pstats``); profiling slows it several times over, so that run's latency figures mean nothing.

Setup: a fast local OpenAI-compatible backend (a bare ASGI app under uvicorn, its own process) streams
``--chunks`` SSE chunks per answer; the gateway (its own process, policy with one backend, no
data-protection hooks: scanners off) sits in front of it. The load generator (this process, one
``httpx.AsyncClient`` or the lean client, ``--client``) keeps N streams in flight: each stream sends
its next request as soon as its last answer ended (closed loop). Each scenario runs direct, then
through the gateway, then direct again (``--rounds`` repeats the pair), with the same requests and
the same client; added latency = the median over the gateway runs' percentiles minus the median
over the direct runs' (``--rounds 3`` gives three gateway runs and four direct ones).

Scenarios (``--scenario KIND:STREAMS``, repeatable; default: all four):

- ``paced:100`` / ``paced:10``: the backend paces its chunks like a model decoding (``--interval-ms``
  between chunks, the first after one interval), so 100 streams are in flight while the cores are
  not saturated. This is the regime of the target: "p50 overhead under 2 ms and p99 under 10 ms at
  100 concurrent streams, without data-protection scanners".
- ``staggered:100`` / ``staggered:10``: the same paced answers and closed loop, but the streams'
  first requests are spread evenly over one answer's duration (``--chunks`` x ``--interval-ms``), as
  independent users' would be. In ``paced`` every stream starts at once and, its answers lasting
  alike, stays in step with the others, so requests arrive in bursts of up to the stream count; here
  about streams x 20 ms / answer duration arrive in any 20 ms. Same streams in flight, same requests,
  same client for the direct and gateway runs; both kinds are printed, neither replaces the other.
- ``saturating:100`` / ``saturating:10``: the backend answers as fast as it can; the loop saturates
  the machine's cores (load generator, backend and gateway share them), so added latency there is
  mostly queueing for CPU: reported with each process's CPU per request.

Per request: time to the first answer byte (TTFT) and to the last (end to end). Also reported: the
gateway's own overhead header (``X-Kvfence-Overhead-Ms``), each process's CPU use, the load average.
Peer figures for context (published, not measured here): LiteLLM 2-12 ms p50, 13-43 ms p99 added
latency on 4-CPU instances.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

KEY = "kvf-gw-bench-key"
# Arrival bursts: requests sent within this window of each other compete for the same cores at once.
BURST_WINDOW_S = 0.020
TARGET_P50_MS, TARGET_P99_MS = 2.0, 10.0

# `kvfence ...` under cProfile on the process's CPU clock; stats written when it exits (SIGTERM included).
PROFILED_SOURCE = r'''
import cProfile, signal, sys, time
from kvfence.cli import main

def stop(signum, frame):
    raise SystemExit(0)

# uvicorn re-raises the SIGTERM it caught once it has shut down: end with an exception, not the
# default handler's instant death, so the stats below are written.
signal.signal(signal.SIGTERM, stop)
out = sys.argv[1]
sys.argv = ["kvfence", *sys.argv[2:]]
profiler = cProfile.Profile(time.process_time)
profiler.enable()
try:
    main()
finally:
    profiler.disable()
    profiler.dump_stats(out)
'''

BACKEND_SOURCE = r'''
import asyncio, itertools, json, os, sys, time
import uvicorn

PACE = {"chunks": int(sys.argv[2]), "interval_s": 0.0}
TIMING = os.environ.get("BENCH_BACKEND_TIMING")  # file: per request (arrived, first chunk sent), by id
MARKS = {}
IDS = itertools.count()
BASE = b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}\n\n'

def named(kind, **fields):
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()

RESPONSE = {"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress", "model": "bench",
            "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
ITEM = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
PART = {"type": "output_text", "text": "", "annotations": []}
DONE_ITEM = {**ITEM, "status": "completed", "content": [{**PART, "text": "tok " * 16}]}
# per path: (events before the first delta, one delta, the events after the last)
STREAMS = {
    "/v1/chat/completions": (b"", BASE, b"data: [DONE]\n\n"),
    "/v1/responses": (
        named("response.created", response=RESPONSE, sequence_number=0)
        + named("response.output_item.added", output_index=0, item=ITEM, sequence_number=1)
        + named("response.content_part.added", item_id="msg_1", output_index=0, content_index=0, part=PART,
                sequence_number=2),
        named("response.output_text.delta", item_id="msg_1", output_index=0, content_index=0, delta="tok ",
              logprobs=[], sequence_number=3),
        named("response.output_text.done", item_id="msg_1", output_index=0, content_index=0, text="tok " * 16,
              logprobs=[], sequence_number=4)
        + named("response.content_part.done", item_id="msg_1", output_index=0, content_index=0,
                part=DONE_ITEM["content"][0], sequence_number=5)
        + named("response.output_item.done", output_index=0, item=DONE_ITEM, sequence_number=6)
        + named("response.completed", response={**RESPONSE, "status": "completed", "output": [DONE_ITEM]},
                sequence_number=7)),
    "/v1/messages": (
        named("message_start", message={"id": "msg_1", "type": "message", "role": "assistant", "model": "bench",
                                        "content": [], "stop_reason": None, "stop_sequence": None,
                                        "usage": {"input_tokens": 5, "output_tokens": 0}})
        + named("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        named("content_block_delta", index=0, delta={"type": "text_delta", "text": "tok "}),
        named("content_block_stop", index=0)
        + named("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}, usage={"output_tokens": 16})
        + named("message_stop")),
}
EMBEDDING = json.dumps({"object": "list", "model": "bench", "usage": {"prompt_tokens": 8, "total_tokens": 8},
                        "data": [{"object": "embedding", "index": 0, "embedding": [0.25] * 256}]}).encode()

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if TIMING:
                    with open(TIMING, "w") as out:
                        json.dump(MARKS, out)
                await send({"type": "lifespan.shutdown.complete"})
                return
    arrived = time.perf_counter()
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path == "/_pace":
        PACE.update(json.loads(body))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if path.endswith("/models"):
        payload = json.dumps({"object": "list", "data": [{"id": "bench", "max_model_len": 32768}]}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})
        return
    if path not in STREAMS and path != "/v1/embeddings":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    key = next((v.decode() for k, v in scope["headers"] if k == b"x-request-id"), None) or f"b{next(IDS)}"
    if path == "/v1/embeddings":  # one JSON answer, after one pacing interval (an embedding model's time)
        await asyncio.sleep(PACE["interval_s"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"x-bench-id", key.encode())]})
        await send({"type": "http.response.body", "body": EMBEDDING})
        return
    head, delta, tail = STREAMS[path]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"x-bench-id", key.encode())]})
    interval = PACE["interval_s"]
    if head:
        await send({"type": "http.response.body", "body": head, "more_body": True})
    for index in range(PACE["chunks"]):
        await asyncio.sleep(interval)  # 0: just yield, as fast as the loop goes
        if TIMING and index == 0:
            MARKS[key] = (arrived, time.perf_counter())
        await send({"type": "http.response.body", "body": delta, "more_body": True})
    await send({"type": "http.response.body", "body": tail, "more_body": False})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", access_log=False,
            timeout_keep_alive=75)
'''

# A proxy hop that does nothing: bytes in, bytes out (uvloop, no HTTP parsing). On a machine whose
# cores are shared, every extra process on the path costs wake-ups and scheduling delay; this relay
# measures that floor in the same run, so the gateway's figure can be read against it.
RELAY_SOURCE = r'''
import asyncio, sys
import uvloop

UPSTREAM = ("127.0.0.1", int(sys.argv[2]))

class Pipe(asyncio.Protocol):
    def __init__(self):
        self.peer = None
        self.transport = None
        self.pending = []

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        if self.peer is not None:
            self.peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc):
        if self.peer is not None:
            self.peer.transport.close()

class Downstream(Pipe):
    def connection_made(self, transport):
        super().connection_made(transport)
        asyncio.ensure_future(self.open())

    async def open(self):
        _, upstream = await asyncio.get_running_loop().create_connection(Pipe, *UPSTREAM)
        upstream.peer, self.peer = self, upstream
        for data in self.pending:
            upstream.transport.write(data)
        self.pending.clear()

async def main():
    server = await asyncio.get_running_loop().create_server(Downstream, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()

uvloop.run(main())
'''

REQUEST_BODY = {"model": "bench", "stream": True, "max_tokens": 16,
                "messages": [{"role": "user", "content": "Say something short about benchmarks."}]}
# --endpoint: the path under /v1 and the body of each API's request (the same question)
ENDPOINTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/chat/completions", REQUEST_BODY),
    "responses": ("/responses", {"model": "bench", "stream": True, "max_output_tokens": 16,
                                 "input": "Say something short about benchmarks."}),
    "messages": ("/messages", {"model": "bench", "stream": True, "max_tokens": 16,
                               "messages": [{"role": "user", "content": "Say something short about benchmarks."}]}),
    "embeddings": ("/embeddings", {"model": "bench", "input": "Say something short about benchmarks."}),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, headers: dict[str, str] | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    """CPU time of all a process's threads so far, in ns precision (Linux schedstat), NaN elsewhere."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                continue  # a thread that just ended
    except OSError:
        return float("nan")
    return total / 1e9


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and its children (a gateway's supervisor and its workers, --gateway-workers)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # the field after the command (which may hold spaces and parentheses) are: state, ppid
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a process that just ended
        if parent == pid:
            children.append(int(entry.name))
    return cpu_seconds(pid) + sum(cpu_seconds(child) for child in children)


def machine_busy_seconds() -> float:
    """CPU seconds all processes on the machine have used (every core, /proc/stat), NaN elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return float("nan")
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


# -- load generators: one streamed POST, returning (status, started, first byte, last byte (perf_counter
# seconds), overhead header, request id: the gateway's x-request-id or the bench backend's x-bench-id)
Outcome = tuple[int, float, float, float, str | None, str | None]
Stream = Callable[[], Awaitable[Outcome]]


# httpcore's pool scans every connection on each request and each response close, so one
# AsyncClient with 100 busy connections spends ~25 ms of CPU per request (measured here); callers
# with 100 streams are rarely one client. The httpx load generator therefore shards its streams
# over one client per HTTPX_STREAMS_PER_CLIENT.
HTTPX_STREAMS_PER_CLIENT = 10


async def _httpx_client(base_url: str, concurrency: int, headers: dict[str, str], endpoint: str = "chat"
                        ) -> tuple[Callable[[int], Stream], Any]:
    limits = httpx.Limits(max_connections=HTTPX_STREAMS_PER_CLIENT, max_keepalive_connections=HTTPX_STREAMS_PER_CLIENT)
    clients = [httpx.AsyncClient(base_url=base_url, limits=limits, timeout=120, headers=headers)
               for _ in range(-(-concurrency // HTTPX_STREAMS_PER_CLIENT))]
    path, body = ENDPOINTS[endpoint]
    payload = json.dumps(body).encode()

    async def close() -> None:
        for client in clients:
            await client.aclose()

    return lambda worker: _httpx_stream(clients[worker // HTTPX_STREAMS_PER_CLIENT], payload, path), close


def _httpx_stream(client: httpx.AsyncClient, payload: bytes, path: str = "/chat/completions") -> Stream:
    async def one() -> Outcome:
        started = time.perf_counter()
        first = 0.0
        async with client.stream("POST", path, content=payload,
                                 headers={"content-type": "application/json"}) as response:
            async for _ in response.aiter_raw():
                if not first:
                    first = time.perf_counter()
            headers = response.headers
            return (response.status_code, started, first, time.perf_counter(), headers.get("x-kvfence-overhead-ms"),
                    headers.get("x-request-id") or headers.get("x-bench-id"))

    return one


async def _fast_client(base_url: str, concurrency: int, headers: dict[str, str], endpoint: str = "chat"
                       ) -> tuple[Callable[[int], Stream], Any]:
    from kvfence.gateway.transport.fast_pool import FastUpstream

    client = FastUpstream(base_url, read_timeout_s=120, max_connections=concurrency)
    path, body = ENDPOINTS[endpoint]
    payload = json.dumps(body).encode()
    all_headers = {**headers, "content-type": "application/json", "accept": "text/event-stream"}

    async def one() -> Outcome:
        started = time.perf_counter()
        response = await client.post(path, payload, all_headers)
        first = 0.0
        async for _ in response.aiter_raw():
            if not first:
                first = time.perf_counter()
        await response.aclose()
        headers = response.headers
        return (response.status_code, started, first, time.perf_counter(), headers.get("x-kvfence-overhead-ms"),
                headers.get("x-request-id") or headers.get("x-bench-id"))

    return lambda worker: one, client.aclose


@dataclass
class Run:
    ttft_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    overhead_ms: list[float] = field(default_factory=list)
    # per recorded request: (id, started, first byte) in perf_counter seconds, for --timing
    marks: list[tuple[str | None, float, float]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    rps: float = 0.0
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)

    def burst_sizes(self) -> list[int]:
        """For each request, how many were sent in the ``BURST_WINDOW_S`` up to it (itself included)."""
        starts = sorted(started for _, started, _ in self.marks)
        return [i - bisect.bisect_left(starts, t - BURST_WINDOW_S) + 1 for i, t in enumerate(starts)]

    def summary(self) -> dict[str, Any]:
        n = len(self.e2e_ms)
        bursts = self.burst_sizes()
        return {"n": n, "ttft_p50_ms": pct(self.ttft_ms, 50), "ttft_p99_ms": pct(self.ttft_ms, 99),
                "burst_p50": pct(bursts, 50), "burst_p99": pct(bursts, 99),
                "e2e_p50_ms": pct(self.e2e_ms, 50), "e2e_p99_ms": pct(self.e2e_ms, 99),
                "e2e_mean_ms": statistics.fmean(self.e2e_ms) if n else float("nan"), "rps": self.rps,
                "errors": sum(self.errors.values()), "error_kinds": self.errors,
                "cpu_ms_per_request": {k: v * 1000 / max(1, n) for k, v in self.cpu_s.items()},
                "cpu_percent_of_one_core": {k: 100 * v / self.wall_s for k, v in self.cpu_s.items()}}


async def load(base_url: str, concurrency: int, total: int, headers: dict[str, str], client_kind: str,
               pids: dict[str, int], stagger_s: float = 0.0, endpoint: str = "chat") -> Run:
    make = _httpx_client if client_kind == "httpx" else _fast_client
    stream_for, close = await make(base_url, concurrency, headers, endpoint)
    run = Run()
    remaining = 0
    record = False

    async def worker(index: int) -> None:
        nonlocal remaining
        one = stream_for(index)
        if record and stagger_s:
            await asyncio.sleep(stagger_s * index / concurrency)  # spread the streams' starts over one answer
        while remaining > 0:
            remaining -= 1
            try:
                status, started, first, last, overhead, request_id = await one()
            except httpx.HTTPError as exc:
                run.errors[type(exc).__name__] = run.errors.get(type(exc).__name__, 0) + 1
                continue
            if status != 200:
                run.errors[f"HTTP {status}"] = run.errors.get(f"HTTP {status}", 0) + 1
                continue
            if record:
                run.ttft_ms.append((first - started) * 1000)
                run.e2e_ms.append((last - started) * 1000)
                run.marks.append((request_id, started, first))
                if overhead is not None:
                    run.overhead_ms.append(float(overhead))

    try:
        remaining = max(concurrency, total // 10)  # warm-up: open every connection, fill the pools
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        run.errors.clear()
        remaining, record = total, True
        cpu_before = {name: tree_cpu_seconds(pid) for name, pid in pids.items()}
        client_before = time.process_time()
        machine_before = machine_busy_seconds()
        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        run.wall_s = time.perf_counter() - started
        run.cpu_s = {name: tree_cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        run.cpu_s["load generator"] = time.process_time() - client_before
        # everything else that ran on the machine meanwhile (other jobs): the cores the bench did not get
        run.cpu_s["other processes"] = max(0.0, machine_busy_seconds() - machine_before - sum(run.cpu_s.values()))
        run.rps = len(run.e2e_ms) / run.wall_s
    finally:
        await close()
    return run


def set_pace(backend_root: str, chunks: int, interval_ms: float) -> None:
    httpx.post(backend_root + "/_pace", json={"chunks": chunks, "interval_s": interval_ms / 1000}, timeout=5)


def run_scenario(kind: str, streams: int, args: argparse.Namespace, urls: dict[str, str],
                 pids: dict[str, int], marks: list[tuple[str, str, list[tuple[str | None, float, float]]]],
                 endpoint: str = "chat") -> dict[str, Any]:
    interval = 0.0 if kind == "saturating" else args.interval_ms
    stagger_s = args.chunks * interval / 1000 if kind == "staggered" else 0.0
    set_pace(urls["backend_root"], args.chunks, interval)
    total = args.requests or (max(500, 10 * streams) if kind == "saturating" else 30 * streams)
    auth = {"authorization": f"Bearer {KEY}"}
    middle = ["relay", "before", "gateway"] if "before" in urls else ["relay", "gateway"]
    order = ["direct"] + [*middle, "direct"] * args.rounds
    runs: list[tuple[str, Run]] = []
    for path in order:
        headers = auth if path in ("gateway", "before") else {}
        runs.append((path, asyncio.run(load(urls[path], streams, total, headers, args.client, pids, stagger_s,
                                            endpoint))))
        marks.append((f"{kind}:{streams}", path, runs[-1][1].marks))
    by_path = {path: [r.summary() for p, r in runs if p == path] for path in ("direct", *middle)}
    overheads = [v for p, r in runs if p == "gateway" for v in r.overhead_ms]

    # Medians over the runs of a path: one run disturbed by something else on the machine (a direct
    # run's p99 doubled by a neighbour) must not move the figure as a mean would.
    def added(metric: str, path: str = "gateway") -> float:
        return (statistics.median(g[metric] for g in by_path[path])
                - statistics.median(d[metric] for d in by_path["direct"]))

    result: dict[str, Any] = {
        "scenario": f"{kind}:{streams}", "endpoint": endpoint, "streams": streams, "requests_per_run": total,
        "chunks_per_answer": args.chunks, "chunk_interval_ms": interval, "client": args.client,
        "runs": [{"path": p, **r.summary()} for p, r in runs],
        "added_ttft_p50_ms": added("ttft_p50_ms"), "added_ttft_p99_ms": added("ttft_p99_ms"),
        "added_e2e_p50_ms": added("e2e_p50_ms"), "added_e2e_p99_ms": added("e2e_p99_ms"),
        "relay_added_ttft_p50_ms": added("ttft_p50_ms", "relay"),
        "relay_added_ttft_p99_ms": added("ttft_p99_ms", "relay"),
        "relay_added_e2e_p50_ms": added("e2e_p50_ms", "relay"),
        "relay_added_e2e_p99_ms": added("e2e_p99_ms", "relay"),
        **({"before_added_ttft_p50_ms": added("ttft_p50_ms", "before"),
            "before_added_ttft_p99_ms": added("ttft_p99_ms", "before"),
            "before_added_e2e_p50_ms": added("e2e_p50_ms", "before"),
            "before_added_e2e_p99_ms": added("e2e_p99_ms", "before")} if "before" in by_path else {}),
        "gateway_overhead_header_p50_ms": pct(overheads, 50),
        "gateway_overhead_header_p99_ms": pct(overheads, 99),
    }
    return result


# --timing: the same requests seen by the client, the gateway and the backend (perf_counter is
# CLOCK_MONOTONIC on Linux: one clock for all processes on the machine)
_GATEWAY_SEGMENTS = [
    ("client sent -> gateway parsed it", "client", "parsed"),
    ("parsed -> request path started", "parsed", "entered"),
    ("request path -> sent upstream", "entered", "sent"),
    ("sent upstream -> backend app got it", "sent", "arrived"),
    ("(backend app got it -> gateway had its headers)", "arrived", "headers"),
    ("backend: arrived -> first chunk sent (pacing)", "arrived", "backend_first"),
    ("backend sent first chunk -> gateway relayed it", "backend_first", "first"),
    ("gateway relayed it -> client read it", "first", "client_first"),
]
_DIRECT_SEGMENTS = [
    ("client sent -> backend app got it", "client", "arrived"),
    ("backend: arrived -> first chunk sent (pacing)", "arrived", "backend_first"),
    ("backend first chunk -> client read it", "backend_first", "client_first"),
]


def print_timing(marks: list[tuple[str, str, list[tuple[str | None, float, float]]]], gateway_file: Path,
                 backend_file: Path) -> None:
    # the client's side too, for analyses of one's own: (scenario, path, [(request id, sent, first byte)])
    (gateway_file.parent / "client.json").write_text(json.dumps(marks))
    # one file per gateway process (worker processes write gateway.json.PID): merged
    gateway: dict[str, Any] = {"requests": {}, "stalls": [], "collections": [], "writer_busy": []}
    for part in sorted(gateway_file.parent.glob(gateway_file.name + "*")):
        record = json.loads(part.read_text())
        gateway["requests"].update(record["requests"])
        for key in ("stalls", "collections", "writer_busy"):
            gateway[key].extend(record.get(key, []))
        for key in ("tracked_objects", "frozen_objects"):
            gateway[key] = gateway.get(key, 0) + record.get(key, 0)
    backend = json.loads(backend_file.read_text()) if backend_file.exists() else {}
    windows: list[tuple[float, float]] = []
    for scenario, path, requests in marks:
        if path not in ("gateway", "direct"):
            continue
        segments = _GATEWAY_SEGMENTS if path == "gateway" else _DIRECT_SEGMENTS
        rows = []
        for request_id, started, first in requests:
            if request_id is None:
                continue
            times = dict(gateway["requests"].get(request_id, {})) if path == "gateway" else {}
            if request_id in backend:
                times["arrived"], times["backend_first"] = backend[request_id]
            times["client"], times["client_first"] = started, first
            if all(a in times and b in times for _, a, b in segments):
                rows.append(times)
        if not rows:
            print(f"\n-- timing {scenario} {path}: no joined requests")
            continue
        if path == "gateway":
            windows.append((min(r["client"] for r in rows), max(r["client_first"] for r in rows)))
        rows.sort(key=lambda r: r["client_first"] - r["client"])
        slow = rows[-max(1, len(rows) // 100):]
        print(f"\n-- timing {scenario} {path}: {len(rows)} requests joined; ms per segment "
              f"(p50, p99, and the mean over the slowest 1 % by TTFT: {len(slow)} requests)")
        for label, a, b in [*segments, ("TTFT", "client", "client_first")]:
            values = [(r[b] - r[a]) * 1000 for r in rows]
            slow_mean = statistics.fmean((r[b] - r[a]) * 1000 for r in slow)
            print(f"   {label:48} p50 {pct(values, 50):7.2f}  p99 {pct(values, 99):7.2f}  slowest 1 %: {slow_mean:7.2f}")
    stalls = [(due, late) for due, late, *_ in gateway["stalls"] if any(lo <= due <= hi for lo, hi in windows)]
    # the gateway's CPU time over its stalls, against their wall time (ticks of 1 ms + how late)
    stall_cpu = sum(rest[0] for due, _, *rest in gateway["stalls"] if rest and any(lo <= due <= hi for lo, hi in windows))
    collections = [c for c in gateway["collections"] if any(lo <= c[0] <= hi for lo, hi in windows)]
    span = sum(hi - lo for lo, hi in windows)
    if span:
        lates = [late * 1000 for _, late in stalls]
        print(f"\n-- gateway event loop during the gateway runs ({span:.1f} s): {len(stalls)} stalls over 2 ms "
              f"(a 1 ms timer that fired late), {sum(lates):.0f} ms in all; p50 {pct(lates, 50):.1f} ms, "
              f"p99 {pct(lates, 99):.1f} ms, max {max(lates, default=0):.1f} ms; on a core "
              f"{100 * stall_cpu / max(1e-9, sum(lates) / 1000 + 0.001 * len(lates)):.0f} % of the stalled time "
              "(the rest it waited for one)")
        for generation in (0, 1, 2):
            chosen = [c for c in collections if c[3] == generation]
            durations = [c[1] * 1000 for c in chosen]
            cpu = [c[2] * 1000 for c in chosen]
            examined = [c[4] for c in chosen]
            garbage = [c[5] for c in chosen]
            print(f"   gc generation {generation}: {len(durations)} collections, {sum(durations):.1f} ms in all "
                  f"(CPU {sum(cpu):.1f} ms), max {max(durations, default=0):.2f} ms (CPU {max(cpu, default=0):.2f} ms);"
                  f" objects examined per collection mean {statistics.fmean(examined) if examined else 0:.0f}, "
                  f"garbage found mean {statistics.fmean(garbage) if garbage else 0:.0f}")
        busy = [(a, b) for a, b in gateway.get("writer_busy", []) if any(lo <= a <= hi for lo, hi in windows)]
        busy_s = sum(b - a for a, b in busy)
        stalled_in_busy = sum(max(0.0, min(b, due + late) - max(a, due)) for due, late in stalls for a, b in busy
                              if a < due + late and b > due)
        print(f"   audit-log writer thread: {len(busy)} batches, busy {100 * busy_s / span:.1f} % of the time; "
              f"{100 * stalled_in_busy / max(1e-9, sum(late for _, late in stalls)):.1f} % of the loop's stalled "
              "time overlapped a batch")
        print(f"   objects the collector tracks at the end: {gateway.get('tracked_objects')} "
              f"(frozen at start: {gateway.get('frozen_objects')})")
        # how much of the slowest requests' time the loop spent stalled
        for scenario, path, requests in marks:
            if path != "gateway":
                continue
            ordered = sorted((first - started, started, first) for _, started, first in requests)
            for label, chosen in (("slowest 1 %", ordered[-max(1, len(ordered) // 100):]),
                                  ("median 1 %", ordered[len(ordered) // 2 - len(ordered) // 200:
                                                         len(ordered) // 2 + len(ordered) // 200 + 1])):
                stalled = [sum(min(hi, due + late) - max(lo, due) for due, late in stalls
                               if due < hi and due + late > lo) * 1000 for _, lo, hi in chosen]
                in_gc = [sum(min(hi, c[0] + c[1]) - max(lo, c[0]) for c in collections
                             if c[0] < hi and c[0] + c[1] > lo) * 1000 for _, lo, hi in chosen]
                print(f"   {scenario} {label} by TTFT (mean {statistics.fmean(t for t, _, _ in chosen) * 1000:.1f} ms):"
                      f" loop stalled {statistics.fmean(stalled):.1f} ms of it, in gc {statistics.fmean(in_gc):.1f} ms")


def print_scenario(result: dict[str, Any]) -> None:
    kind, streams = result["scenario"].split(":")
    if kind in ("paced", "staggered"):
        how = (f"backend paces {result['chunks_per_answer']} chunks {result['chunk_interval_ms']:g} ms apart "
               "(like a model decoding)")
        if kind == "staggered":
            how += ", streams' starts spread over one answer"
    else:
        how = f"backend sends {result['chunks_per_answer']} chunks as fast as it can (saturates the cores)"
    print(f"\n== {result['scenario']} /v1{ENDPOINTS[result['endpoint']][0]}: {streams} concurrent streams, "
          f"closed loop, {how}; "
          f"{result['requests_per_run']} requests per run, load generator: {result['client']}")
    print(f"{'run':9} {'TTFT p50':>9} {'TTFT p99':>9} {'e2e p50':>9} {'e2e p99':>9} {'req/s':>7} {'err':>4}"
          "   CPU ms/request (% of one core): gateway | relay | backend | load generator | rest of machine")
    for run in result["runs"]:
        cpu, share = run["cpu_ms_per_request"], run["cpu_percent_of_one_core"]
        gateway_cpu = "before" if run["path"] == "before" else "gateway"
        cols = " | ".join(f"{cpu[k]:.2f} ({share[k]:.0f}%)" for k in (gateway_cpu, "relay", "backend", "load generator"))
        cols += f" | other processes {share['other processes']:.0f}%"
        print(f"{run['path']:9} {run['ttft_p50_ms']:9.2f} {run['ttft_p99_ms']:9.2f} {run['e2e_p50_ms']:9.2f} "
              f"{run['e2e_p99_ms']:9.2f} {run['rps']:7.1f} {run['errors']:4d}   {cols}")
        if run["error_kinds"]:
            print(f"          errors: {run['error_kinds']}")
    others = max(run["cpu_percent_of_one_core"]["other processes"] for run in result["runs"])
    if others > 25:
        # the 2026-12-02 lesson: a run on a machine that is not idle reads as a gateway wait
        print(f"  note: the rest of the machine used up to {others:.0f} % of one core during these runs: unless "
              "the bench ran at a raised priority (docs/benchmarks.md), the latency percentiles include waits for "
              "a core; compare the relay line")
    p50, p99 = result["added_e2e_p50_ms"], result["added_e2e_p99_ms"]
    print(f"added by the gateway (median of gateway runs - median of direct runs): TTFT p50 {result['added_ttft_p50_ms']:.2f} ms, "
          f"p99 {result['added_ttft_p99_ms']:.2f} ms; end to end p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(f"  vs target (p50 < {TARGET_P50_MS:g} ms, p99 < {TARGET_P99_MS:g} ms): TTFT p50 x"
          f"{result['added_ttft_p50_ms'] / TARGET_P50_MS:.2f}, p99 x{result['added_ttft_p99_ms'] / TARGET_P99_MS:.2f}; "
          f"e2e p50 x{p50 / TARGET_P50_MS:.2f}, p99 x{p99 / TARGET_P99_MS:.2f} (x1.00 = at target; the target is "
          "stated for 100 streams)")
    print(f"  a do-nothing TCP relay in the same place (the floor of any extra process hop here): TTFT p50 "
          f"{result['relay_added_ttft_p50_ms']:.2f} ms, p99 {result['relay_added_ttft_p99_ms']:.2f} ms; end to end "
          f"p50 {result['relay_added_e2e_p50_ms']:.2f} ms, p99 {result['relay_added_e2e_p99_ms']:.2f} ms")
    gateway_runs = [r for r in result["runs"] if r["path"] == "gateway"]
    if gateway_runs:
        burst50 = statistics.median(r["burst_p50"] for r in gateway_runs)
        burst99 = statistics.median(r["burst_p99"] for r in gateway_runs)
        uniform = statistics.median(r["rps"] for r in gateway_runs) * BURST_WINDOW_S
        cpu = statistics.median(r["cpu_ms_per_request"]["gateway"] for r in gateway_runs)
        # The closed loop keeps its streams in step (they start together and last alike), so requests
        # come in bursts; one gateway process serves a burst's request starts one after another.
        print(f"  arrival bursts (gateway runs): requests sent in the {BURST_WINDOW_S * 1000:g} ms up to each one, "
              f"p50 {burst50:.0f}, p99 {burst99:.0f} (uniform arrivals at this rate: {uniform:.1f}); p99 burst x "
              f"gateway CPU per request = {burst99 * cpu:.1f} ms (an upper bound on the serial gateway work one "
              "burst brings: a request's CPU includes its later chunks)")
    if "before_added_e2e_p50_ms" in result:
        print(f"  the 'before' gateway in the same run: TTFT p50 {result['before_added_ttft_p50_ms']:.2f} ms, "
              f"p99 {result['before_added_ttft_p99_ms']:.2f} ms; end to end p50 {result['before_added_e2e_p50_ms']:.2f} ms, "
              f"p99 {result['before_added_e2e_p99_ms']:.2f} ms")
    for path in ("gateway", "before"):
        cpu = [r["cpu_ms_per_request"][path] for r in result["runs"] if r["path"] == path]
        if cpu:
            print(f"  {path} CPU per request: median {statistics.median(cpu):.3f} ms over {len(cpu)} runs "
                  f"({statistics.median(cpu) * 1000 / result['chunks_per_answer']:.0f} us per streamed chunk if all "
                  "of it were per chunk: an upper bound; two --chunks values split it)")
    print(f"  gateway's own overhead header: p50 {result['gateway_overhead_header_p50_ms']:.3f} ms, "
          f"p99 {result['gateway_overhead_header_p99_ms']:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", default=None,
                        help="KIND:STREAMS, KIND paced, staggered or saturating (repeatable; default: paced:100 paced:10 "
                             "saturating:100 saturating:10)")
    parser.add_argument("--chunks", type=int, default=16, help="SSE chunks per answer")
    parser.add_argument("--interval-ms", type=float, default=40.0, help="chunk spacing of paced scenarios")
    parser.add_argument("--requests", type=int, default=0,
                        help="requests per run (default 30 x streams paced, max(500, 10 x streams) saturating)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="relay/gateway/direct triples after the first direct run")
    parser.add_argument("--client", choices=["httpx", "fast"], default="fast",
                        help="load generator, the same for both paths: the gateway's lean HTTP/1.1 client (least CPU "
                             "taken from the cores under test) or httpx.AsyncClient (what the openai SDK uses; one "
                             f"client per {HTTPX_STREAMS_PER_CLIENT} streams)")
    parser.add_argument("--gateway-http-client", choices=["auto", "httpx"], default="auto",
                        help="the gateway's upstream client (policy http_client)")
    parser.add_argument("--before-src", type=Path, default=None,
                        help="also run a second gateway from another source tree (its src/ directory, e.g. an "
                             "older commit from `git archive`), interleaved in the same run: path 'before'")
    parser.add_argument("--before-server", choices=["lean", "uvicorn"], default=None,
                        help="run the 'before' gateway (--before-src: a tree from before kvfence.http, which still "
                             "has `kvfence gateway --server`) with this HTTP server")
    parser.add_argument("--gateway-workers", type=int, default=1, metavar="N",
                        help="run the gateway as N worker processes on one port (`kvfence gateway --workers N`); "
                             "its CPU is the supervisor's and the workers' together")
    parser.add_argument("--before-workers", type=int, default=None, metavar="N",
                        help="run the 'before' gateway with N workers; without --before-src it runs from this tree, "
                             "so `--gateway-workers 2 --before-workers 1` is an A/B of the worker count alone")
    parser.add_argument("--profile-gateway", type=Path, default=None, metavar="FILE",
                        help="run the gateway under cProfile (CPU clock) and write its stats to FILE at exit "
                             "(slows the gateway: for where its CPU goes, not for its latency)")
    parser.add_argument("--timing", type=Path, default=None, metavar="DIR",
                        help="record per-request timestamps in the client, the gateway (KVFENCE_GATEWAY_TIMING) and "
                             "the backend, write them to DIR, and print where the gateway runs' time went")
    parser.add_argument("--endpoint", action="append", choices=list(ENDPOINTS), default=None,
                        help="the API each scenario's requests use (repeatable: each scenario runs once per endpoint, "
                             "one after the other in the same run; default: chat). The backend answers each in its "
                             "own stream format with the same number of text deltas; embeddings: one JSON answer")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.before_server is not None and args.before_src is None:
        parser.error("--before-server needs --before-src (this tree's gateway has one HTTP server)")
    endpoints = args.endpoint or ["chat"]
    scenarios = args.scenario or ["paced:100", "paced:10", "saturating:100", "saturating:10"]
    parsed = []
    for spec in scenarios:
        kind, _, streams = spec.partition(":")
        if kind not in ("paced", "staggered", "saturating") or not streams.isdigit():
            parser.error(f"--scenario {spec!r}: expected paced:N, staggered:N or saturating:N")
        parsed.append((kind, int(streams)))

    from kvfence.gateway.policy.tenants import hash_api_key

    tmp = Path(tempfile.mkdtemp(prefix="kvfence-bench-gw-"))
    backend_port, gateway_port, relay_port = free_port(), free_port(), free_port()
    (tmp / "backend.py").write_text(BACKEND_SOURCE)
    (tmp / "relay.py").write_text(RELAY_SOURCE)
    client_line = "" if args.gateway_http_client == "auto" else f"http_client: {args.gateway_http_client}, "
    policy = f"""
gateway: {{audit_log: "sqlite:///{tmp}/audit.db", capacity_refresh_s: 0, load_protection: false}}
data_classes: [{{name: public, allowed_tiers: [shared]}}]
backends:
  - {{name: fast, url: "http://127.0.0.1:{backend_port}/v1", tier: shared, capacity: policy,
      apis: [openai, anthropic], {client_line}facts: {{advertised_context: 32768, kv_capacity_tokens: 32768}}}}
tenants:
  - {{name: bench, key_sha256: {hash_api_key(KEY)}, organization: bench, default_class: public}}
"""
    (tmp / "gateway.yaml").write_text(policy)
    # a 'before' tree from before kvfence.apis (e.g. b2e3e58) refuses the backends' `apis` field: its
    # policy goes without it (chat only, which is all those trees serve)
    before_policy = tmp / "gateway.yaml"
    if args.before_src is not None and not (args.before_src / "kvfence" / "apis").exists():
        before_policy = tmp / "gateway-before.yaml"
        before_policy.write_text(policy.replace("apis: [openai, anthropic], ", ""))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    backend_env, gateway_env = env, env
    if args.timing is not None:
        args.timing.mkdir(parents=True, exist_ok=True)
        for stale in args.timing.glob("gateway.json*"):  # each worker writes its own file: no mixing runs
            stale.unlink()
        backend_env = {**env, "BENCH_BACKEND_TIMING": str((args.timing / "backend.json").resolve())}
        gateway_env = {**env, "KVFENCE_GATEWAY_TIMING": str((args.timing / "gateway.json").resolve())}
    backend = subprocess.Popen([sys.executable, str(tmp / "backend.py"), str(backend_port), str(args.chunks)],
                               env=backend_env)
    kvfence = str(Path(sys.executable).parent / "kvfence")
    gateway_cmd = [kvfence, "gateway", "--config", str(tmp / "gateway.yaml"), "--port", str(gateway_port),
                   "--log-level", "error",
                   *(["--workers", str(args.gateway_workers)] if args.gateway_workers != 1 else [])]
    if args.profile_gateway is not None:
        (tmp / "profiled.py").write_text(PROFILED_SOURCE)
        gateway_cmd = [sys.executable, str(tmp / "profiled.py"), str(args.profile_gateway.resolve()), *gateway_cmd[1:]]
    gateway = subprocess.Popen(gateway_cmd, env=gateway_env)
    before_port = free_port()
    before = None
    if args.before_src is not None or args.before_server is not None or args.before_workers is not None:
        before_env = env if args.before_src is None else {**env, "PYTHONPATH": str(args.before_src.resolve())}
        before = subprocess.Popen(
            [kvfence, "gateway", "--config", str(before_policy), "--port", str(before_port), "--log-level",
             "error", *(["--server", args.before_server] if args.before_server else []),
             *(["--workers", str(args.before_workers)] if args.before_workers not in (None, 1) else [])],
            env=before_env)
    relay = subprocess.Popen([sys.executable, str(tmp / "relay.py"), str(relay_port), str(backend_port)], env=env)
    urls = {"direct": f"http://127.0.0.1:{backend_port}/v1", "gateway": f"http://127.0.0.1:{gateway_port}/v1",
            "relay": f"http://127.0.0.1:{relay_port}/v1", "backend_root": f"http://127.0.0.1:{backend_port}"}
    load_before = os.getloadavg()
    results = []
    marks: list[tuple[str, str, list[tuple[str | None, float, float]]]] = []
    try:
        wait_ready(urls["direct"] + "/models")
        wait_ready(urls["gateway"] + "/models", {"authorization": f"Bearer {KEY}"})
        wait_ready(urls["relay"] + "/models")
        pids = {"gateway": gateway.pid, "relay": relay.pid, "backend": backend.pid}
        if before is not None:
            urls["before"] = f"http://127.0.0.1:{before_port}/v1"
            wait_ready(urls["before"] + "/models", {"authorization": f"Bearer {KEY}"})
            pids["before"] = before.pid
        for kind, streams in parsed:
            for endpoint in endpoints:
                result = run_scenario(kind, streams, args, urls, pids, marks, endpoint)
                results.append(result)
                if not args.json:
                    print_scenario(result)
    finally:
        procs = [p for p in (gateway, before, relay, backend) if p is not None]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
    if args.timing is not None and not args.json:
        print_timing(marks, args.timing / "gateway.json", args.timing / "backend.json")
    setup = {"cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
             "scanners": "off", "gateway_http_client": args.gateway_http_client,
             "before_src": str(args.before_src) if args.before_src else None,
             "gateway_server": "kvfence.http", "before_server": args.before_server or "default",
             "gateway_workers": args.gateway_workers, "before_workers": args.before_workers or 1}
    if args.json:
        print(json.dumps({"setup": setup, "scenarios": results}, indent=2))
        return
    print(f"\n{os.cpu_count()} CPUs shared by load generator, backend, relay and gateway (and whatever else runs: "
          "'other processes' above is the CPU the rest of the machine used during each run); load average before "
          f"{load_before[0]:.2f}, after {setup['load_average_after'][0]:.2f}; scanners off; gateway upstream "
          f"client: {args.gateway_http_client}; gateway server: {setup['gateway_server']}, "
          f"{args.gateway_workers} worker(s)"
          + (f"; 'before' = gateway from {args.before_src or 'this tree'}, server {setup['before_server']}, "
             f"{setup['before_workers']} worker(s)" if before is not None else ""))
    print("peer (published, not measured here): LiteLLM 2-12 ms p50, 13-43 ms p99 added on 4-CPU instances")


if __name__ == "__main__":
    main()
