"""`kvfence serve`'s HTTP path: this tree against another tree's server (``--before-src``), same run.

    .venv/bin/python bench/serve_http.py --before-src /tmp/before/src   # e.g. git archive b2e3e58 src
    .venv/bin/python bench/serve_http.py --rounds 5 --requests 40

Both servers run as real `kvfence serve --no-auth` subprocesses on 127.0.0.1 with the built-in
random-weight model, one torch thread each. One request at a time (nothing queues, so a wait in the
server shows as itself, not as queueing), on one kept-alive connection per server, alternating
servers round by round:

- ``GET /health``: the HTTP server alone (no engine step): time to the whole answer;
- a streamed ``POST /v1/chat/completions`` (a short prompt, ``--max-tokens`` tokens): time to the
  first event (TTFT as a client sees it; serve sends the role delta once the request is admitted,
  before the engine's first token, so this is mostly the server's path) and to the end of the
  answer (the engine's prefill and decode steps plus the server's path).

Reported per server: min and median over all rounds of each figure, and before/this tree. On a
shared machine the minimum is the steadier figure; the medians move with whatever else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
PROMPT = "Say something short about benchmarks."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Serve:
    """`kvfence serve --no-auth` from ``src`` (a source tree's src/ directory) on a free port."""

    def __init__(self, name: str, src: Path, workdir: Path) -> None:
        self.name = name
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": str(src), "KVFENCE_HOME": str(workdir / name)}
        self.log = (workdir / f"{name}.log").open("w")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "kvfence"), "serve", "--no-auth", "--port", str(self.port),
             "--threads", "1", "--log-level", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name}: kvfence serve exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: kvfence serve did not become ready")
            time.sleep(0.3)
        self.model = httpx.get(f"http://127.0.0.1:{self.port}/v1/models").json()["data"][0]["id"]
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()

    def _head(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split()[1]), headers

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError(f"{self.name} closed the connection")
        self.buffer += data

    def health(self) -> float:
        started = time.perf_counter()
        self.sock.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        status, headers = self._head()
        size = int(headers.get("content-length", "0"))
        while len(self.buffer) < size:
            self._fill()
        self.buffer = self.buffer[size:]
        if status != 200:
            raise RuntimeError(f"{self.name} /health answered {status}")
        return time.perf_counter() - started

    def stream(self, max_tokens: int) -> tuple[float, float]:
        body = json.dumps({"model": self.model, "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
                           "messages": [{"role": "user", "content": PROMPT}]}).encode()
        request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                   b"content-length: %d\r\n\r\n%s" % (len(body), body))
        started = time.perf_counter()
        self.sock.sendall(request)
        status, headers = self._head()
        if status != 200 or headers.get("transfer-encoding") != "chunked":
            raise RuntimeError(f"{self.name} answered {status} {headers}")
        first = 0.0
        while not self.buffer.endswith(b"0\r\n\r\n"):  # SSE events never end in this pattern themselves
            if not first and b"data:" in self.buffer:
                first = time.perf_counter()
            self._fill()
        if not first:
            first = time.perf_counter()
        self.buffer = b""
        return first - started, time.perf_counter() - started


def summary(values: list[float]) -> str:
    return f"min {min(values) * 1000:7.2f}  median {statistics.median(values) * 1000:7.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-src", type=Path, default=None, help="the other tree's src/ directory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=30, help="of each kind per server per round")
    parser.add_argument("--max-tokens", type=int, default=4)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="kvfence-bench-serve-http-"))
    servers = [Serve("this tree", REPO / "src", workdir)]
    if args.before_src is not None:
        servers.append(Serve("before", args.before_src.resolve(), workdir))
    load_before = os.getloadavg()
    figures: dict[str, dict[str, list[float]]] = {s.name: {"health": [], "ttft": [], "e2e": []} for s in servers}
    try:
        for server in servers:  # warm-up: first requests compile and allocate
            for _ in range(3):
                server.health()
                server.stream(args.max_tokens)
        for round_index in range(args.rounds):
            for server in servers if round_index % 2 == 0 else servers[::-1]:
                out = figures[server.name]
                for _ in range(args.requests):
                    out["health"].append(server.health())
                    ttft, e2e = server.stream(args.max_tokens)
                    out["ttft"].append(ttft)
                    out["e2e"].append(e2e)
    finally:
        for server in servers:
            server.close()
    print(f"kvfence serve, built-in model, 1 torch thread, one request at a time; {args.rounds} rounds x "
          f"{args.requests} requests of each kind per server, servers alternated; ms")
    for name, out in figures.items():
        print(f"{name:10} GET /health {summary(out['health'])} | chat first event {summary(out['ttft'])} | "
              f"chat end ({args.max_tokens} tokens) {summary(out['e2e'])}")
    if len(servers) == 2:
        this, before = figures["this tree"], figures["before"]
        for kind in ("health", "ttft", "e2e"):
            print(f"  {kind}: before / this tree, min {min(before[kind]) / min(this[kind]):.2f}x, median "
                  f"{statistics.median(before[kind]) / statistics.median(this[kind]):.2f}x")
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
