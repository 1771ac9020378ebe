"""Attack: backends that read the whole POST and then fail (issue 16, item 8). One client request must
never become several upstream generations (each billed by a hosted API).

Three backends of one class, each a raw socket that counts the requests it read whole, then hangs up
without a byte, answers half a status line, or resets the connection. The gateway may not resend a
request to a backend that may have read it, and after such a failure it tries at most one other
backend: exactly one generation per backend tried, at most two backends in all, and the client gets
a 503. A backend that refuses connections (the request provably never reached it) is skipped and the
next one still answers. Both upstream clients (lean and httpx), streamed and whole answers.
"""

from __future__ import annotations

import collections
import json
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway
from tests.gateway.raw_backend import serve_raw
from tests.netutil import free_port

KEY = "kvf-gw-amplification-key"
_ANSWER = json.dumps({"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"},
                                   "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


class Counting:
    """What a raw backend read: requests by prompt."""

    def __init__(self) -> None:
        self.seen: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, conn: socket.socket, prompt: str) -> None:
        with self.lock:
            self.seen[prompt] += 1
        how = prompt.split(":", 1)[0]
        if how == "hang-up":
            return  # closes without a byte
        if how == "half-status":
            conn.sendall(b"HTTP/1.1 2")
            return
        if how == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                     b"connection: close\r\n\r\n%s" % (len(_ANSWER), _ANSWER))


@pytest.fixture(scope="module")
def backends() -> Iterator[list[tuple[int, Counting]]]:
    counters = [Counting() for _ in range(3)]
    with serve_raw(counters[0]) as a, serve_raw(counters[1]) as b, serve_raw(counters[2]) as c:
        yield list(zip([a, b, c], counters, strict=True))


def _policy(tmp: Path, ports: list[int], client: str) -> dict[str, object]:
    return {
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0, "load_protection": False,
                    "backend_retry_after_s": 0},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": f"b{i}", "url": f"http://127.0.0.1:{port}/v1", "tier": "shared", "capacity": "policy",
                      "http_client": client, "facts": {"advertised_context": 4096, "kv_capacity_tokens": 4096}}
                     for i, port in enumerate(ports)],
        "tenants": [{"name": "t", "key_sha256": hash_api_key(KEY), "organization": "acme", "default_class": "public"}],
    }


@pytest.fixture(scope="module", params=["auto", "httpx"])
def gateway(request: pytest.FixtureRequest, backends: list[tuple[int, Counting]],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp(f"gw-amp-{request.param}")
    gw = Gateway(_policy(tmp, [port for port, _ in backends], request.param), tmp,
                 env={"KVFENCE_GATEWAY_SECRET": "amplification-test-secret-0123456789"})
    yield gw
    gw.stop()


def _post(gw: Gateway, prompt: str, stream: bool) -> httpx.Response:
    return httpx.post(gw.url + "/chat/completions", headers={"authorization": f"Bearer {KEY}"}, timeout=30,
                      json={"model": "m", "stream": stream, "messages": [{"role": "user", "content": prompt}]})


@pytest.mark.parametrize("how", ["hang-up", "half-status", "reset"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_backend_that_read_the_request_never_gets_it_twice(gateway: Gateway, backends: list[tuple[int, Counting]],
                                                             how: str, stream: bool) -> None:
    prompt = f"{how}:{stream}:{gateway.port}"  # one prompt per case: the counters are per prompt
    response = _post(gateway, prompt, stream)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "backend_unavailable"
    generations = [counter.seen[prompt] for _, counter in backends]
    assert max(generations) == 1, f"a backend read the same request more than once: {generations}"
    assert sum(generations) == 2, f"expected the first backend and one fallback, got {generations}"


def test_a_backend_the_request_never_reached_is_skipped(backends: list[tuple[int, Counting]],
                                                        tmp_path: Path) -> None:
    closed = free_port()  # nothing listens: connect fails, the request provably was never sent
    ok_port, ok_counter = backends[0]
    gw = Gateway(_policy(tmp_path, [closed, closed, ok_port], "auto"), tmp_path,
                 env={"KVFENCE_GATEWAY_SECRET": "amplification-test-secret-0123456789"})
    try:
        prompt = f"answer:{tmp_path.name}"
        response = _post(gw, prompt, False)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"] == "fine"
        assert ok_counter.seen[prompt] == 1
    finally:
        gw.stop()
