"""Two HTTP attacks against a server already running on 127.0.0.1 (``kvfence serve`` or ``kvfence gateway``):

    python bench/http_attacks.py PORT [--head-timeout S]

1. head flood: 4 clients each send a 64 MiB request head while /health is probed every 50 ms; prints
   how long the flood lasted (the server reading it, or cutting it off) and the slowest /health;
2. slowloris: 300 connections each send a request line and then one more header line every 0.5 s;
   prints how many are still open ``--head-timeout`` + 2 s later.

Used for docs/http-limits.md (the new server against the tree before it, same machine, one after the
other: the attacks are not interleaved, they saturate the server).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading
import time

import httpx


def head_flood(port: int, clients: int = 4, mib: int = 64) -> tuple[float, float, int]:
    def flood() -> None:
        try:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: ")
                chunk = b"a" * 65536
                for _ in range(mib * 16):
                    sock.sendall(chunk)
        except OSError:
            pass  # the server closed the connection: the head was refused

    threads = [threading.Thread(target=flood) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    latencies = []
    while any(t.is_alive() for t in threads) and time.perf_counter() - started < 120:
        probe = time.perf_counter()
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=120)
        latencies.append(time.perf_counter() - probe)
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, max(latencies, default=0.0), len(latencies)


def slowloris(port: int, wait_s: float, connections: int = 300) -> int:
    conns = []
    for _ in range(connections):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        conns.append(conn)
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.send(b"x-a: b\r\n")
        time.sleep(0.5)
    still_open = 0
    for conn in conns:
        conn.settimeout(0.05)
        try:
            data = conn.recv(65536)
            still_open += 0 if data == b"" or data.startswith(b"HTTP/1.1 408") else 1
        except TimeoutError:
            still_open += 1
        except OSError:
            pass
        conn.close()
    return still_open


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("port", type=int)
    parser.add_argument("--head-timeout", type=float, default=10.0, help="the server's head timeout (s)")
    args = parser.parse_args()
    lasted, worst, probes = head_flood(args.port)
    print(f"head flood (4 x 64 MiB): over in {lasted:.2f} s; slowest /health {worst * 1000:.1f} ms ({probes} probes)")
    wait = args.head_timeout + 2
    print(f"slowloris: {slowloris(args.port, wait)} of 300 connections still open {wait:g} s after they started")


if __name__ == "__main__":
    main()
