"""Overhead of `kvfence gateway` against calling the backend directly, measured in the same run.

    .venv/bin/python bench/gateway.py [--concurrency 100] [--requests 3000] [--chunks 16] [--json]

A fast local OpenAI-compatible backend (a bare ASGI app under uvicorn, in its own process) streams
``--chunks`` SSE chunks per answer. The same closed-loop load (``--concurrency`` streams in flight,
official-client-shaped requests over httpx) runs first straight at the backend, then through the
gateway (its own process, no data-protection hooks: scanners off), then straight again. Reported:

- end-to-end latency per streamed request (to the last byte), p50/p99, and requests/s, both paths;
- added latency = gateway percentile minus direct percentile (direct = mean of the two direct runs);
- the gateway's own overhead header (``X-Kvfence-Overhead-Ms``: time spent in the gateway before the
  upstream request left plus between upstream headers and its own), p50/p99.

Peer figures for context (not measured here): LiteLLM publishes 2-12 ms p50 and 13-43 ms p99 added
latency on 4-CPU instances.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

KEY = "kvf-gw-bench-key"

BACKEND_SOURCE = r'''
import asyncio, json, sys
import uvicorn

CHUNKS = int(sys.argv[2])

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"].endswith("/models"):
        payload = json.dumps({"object": "list", "data": [{"id": "bench", "max_model_len": 32768}]}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})
        return
    if scope["path"] != "/v1/chat/completions":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    base = '{"id":"c1","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}'
    for _ in range(CHUNKS):
        await send({"type": "http.response.body", "body": b"data: " + base.encode() + b"\n\n", "more_body": True})
        await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", access_log=False, timeout_keep_alive=75)
'''


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


async def load(base_url: str, concurrency: int, total: int, headers: dict[str, str]) -> dict[str, Any]:
    body = {"model": "bench", "stream": True, "max_tokens": 16,
            "messages": [{"role": "user", "content": "Say something short about benchmarks."}]}
    latencies: list[float] = []
    overheads: list[float] = []
    errors = 0
    kinds: dict[str, int] = {}
    remaining = total
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=120, headers=headers) as client:
        async def worker() -> None:
            nonlocal remaining, errors
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                try:
                    async with client.stream("POST", "/chat/completions", json=body) as response:
                        async for _ in response.aiter_raw():
                            pass
                        if response.status_code != 200:
                            errors += 1
                            kinds[f"HTTP {response.status_code}"] = kinds.get(f"HTTP {response.status_code}", 0) + 1
                            continue
                        header = response.headers.get("x-kvfence-overhead-ms")
                except httpx.HTTPError as exc:
                    errors += 1
                    kinds[type(exc).__name__] = kinds.get(type(exc).__name__, 0) + 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
                if header is not None:
                    overheads.append(float(header))

        # warm-up: open the pool's connections before timing
        warm = min(total // 10, concurrency)
        remaining = warm
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        latencies.clear()
        overheads.clear()
        remaining = total
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {"latencies": latencies, "overheads": overheads, "errors": errors, "error_kinds": kinds,
            "rps": len(latencies) / elapsed}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), or NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from kvfence.gateway.tenants import hash_api_key

    tmp = Path(tempfile.mkdtemp(prefix="kvfence-bench-gw-"))
    backend_port, gateway_port = free_port(), free_port()
    (tmp / "backend.py").write_text(BACKEND_SOURCE)
    policy = f"""
gateway: {{audit_log: "sqlite:///{tmp}/audit.db", capacity_refresh_s: 0, load_protection: false}}
data_classes: [{{name: public, allowed_tiers: [shared]}}]
backends:
  - {{name: fast, url: "http://127.0.0.1:{backend_port}/v1", tier: shared, capacity: policy,
      facts: {{advertised_context: 32768, kv_capacity_tokens: 32768}}}}
tenants:
  - {{name: bench, key_sha256: {hash_api_key(KEY)}, organization: bench, default_class: public}}
"""
    (tmp / "gateway.yaml").write_text(policy)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen([sys.executable, str(tmp / "backend.py"), str(backend_port), str(args.chunks)], env=env),
        subprocess.Popen([str(Path(sys.executable).parent / "kvfence"), "gateway", "--config", str(tmp / "gateway.yaml"),
                          "--port", str(gateway_port), "--log-level", "error"], env=env),
    ]
    try:
        direct_url = f"http://127.0.0.1:{backend_port}/v1"
        gateway_url = f"http://127.0.0.1:{gateway_port}/v1"
        auth = {"authorization": f"Bearer {KEY}"}
        wait_ready(direct_url + "/models")
        wait_ready(gateway_url + "/models", auth)
        runs = {}
        cpu: dict[str, float] = {}
        client_cpu = time.process_time()
        runs["direct_1"] = asyncio.run(load(direct_url, args.concurrency, args.requests, {}))
        # the bench client is itself an httpx client doing one streamed request each: the same
        # per-request client work the gateway has to do towards its backend
        cpu["bench_client_httpx_ms_per_request"] = (time.process_time() - client_cpu) * 1000 / max(1, args.requests)
        before = cpu_seconds(procs[1].pid)
        runs["gateway"] = asyncio.run(load(gateway_url, args.concurrency, args.requests, auth))
        cpu["gateway_ms_per_request"] = (cpu_seconds(procs[1].pid) - before) * 1000 / max(1, args.requests)
        before = cpu_seconds(procs[0].pid)
        runs["direct_2"] = asyncio.run(load(direct_url, args.concurrency, args.requests, {}))
        cpu["backend_ms_per_request"] = (cpu_seconds(procs[0].pid) - before) * 1000 / max(1, args.requests)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)

    def summary(run: dict[str, Any]) -> dict[str, float]:
        lat = run["latencies"]
        return {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "mean_ms": statistics.fmean(lat) if lat else 0.0,
                "rps": run["rps"], "errors": run["errors"], "n": len(lat)}

    direct = [summary(runs["direct_1"]), summary(runs["direct_2"])]
    gw = summary(runs["gateway"])
    direct_p50 = statistics.fmean(d["p50_ms"] for d in direct)
    direct_p99 = statistics.fmean(d["p99_ms"] for d in direct)
    result = {
        "setup": {"concurrency": args.concurrency, "requests": args.requests, "chunks_per_answer": args.chunks,
                  "cpus": os.cpu_count(), "scanners": "off"},
        "direct": direct,
        "gateway": gw,
        "added_latency_p50_ms": gw["p50_ms"] - direct_p50,
        "added_latency_p99_ms": gw["p99_ms"] - direct_p99,
        "gateway_overhead_header_p50_ms": pct(runs["gateway"]["overheads"], 50),
        "gateway_overhead_header_p99_ms": pct(runs["gateway"]["overheads"], 99),
        **cpu,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"kvfence gateway overhead: {args.concurrency} concurrent streams, {args.requests} requests per run, "
          f"{args.chunks} chunks per answer, {os.cpu_count()} CPUs, scanners off")
    print(f"{'path':10} {'p50 ms':>9} {'p99 ms':>9} {'req/s':>9} {'errors':>7}")
    for name, s in (("direct #1", direct[0]), ("gateway", gw), ("direct #2", direct[1])):
        print(f"{name:10} {s['p50_ms']:9.2f} {s['p99_ms']:9.2f} {s['rps']:9.1f} {s['errors']:7d}")
    for name, run in runs.items():
        if run["error_kinds"]:
            print(f"  errors in {name}: {run['error_kinds']}")
    print(f"added latency (gateway - direct): p50 {result['added_latency_p50_ms']:.2f} ms, "
          f"p99 {result['added_latency_p99_ms']:.2f} ms")
    print(f"gateway's own overhead header: p50 {result['gateway_overhead_header_p50_ms']:.3f} ms, "
          f"p99 {result['gateway_overhead_header_p99_ms']:.3f} ms")
    print(f"CPU per request (includes warm-up): gateway {cpu['gateway_ms_per_request']:.2f} ms, "
          f"backend {cpu['backend_ms_per_request']:.2f} ms, "
          f"bench client (httpx, direct run) {cpu['bench_client_httpx_ms_per_request']:.2f} ms")
    print("peer (published, not measured here): LiteLLM 2-12 ms p50, 13-43 ms p99 added on 4-CPU instances")


if __name__ == "__main__":
    main()
