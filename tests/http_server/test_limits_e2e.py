"""Every server kvfence starts holds its HTTP limits against a client on a raw socket (issue 16, item 6).

Each attack runs against each server: ``kvfence serve``, ``kvfence serve --disagg`` (slow: it spawns
a prefill worker), ``kvfence gateway``, and ``kvfence gateway --workers 2``, all real processes on 127.0.0.1 with small
limits so the tests are quick: an oversize head, too many header fields, a slowloris head that keeps
trickling bytes, a slow body, an idle keep-alive connection, an oversize body (declared and chunked).
Each is answered with its OpenAI-shaped status (431/408/413) and a closed connection, and the server
still answers others afterwards.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway, KvfenceServe, Process
from tests.http_server.harness import RawClient

KEY = "sk-limits-test-key-0123456789"
HEAD_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 1.0
MAX_HEAD_BYTES = 8192
MAX_HEADERS = 30
MAX_BODY_BYTES = 4096
PATH = "/v1/chat/completions"


class Target:
    def __init__(self, name: str, proc: Process, auth: bytes) -> None:
        self.name = name
        self.proc = proc
        self.port = proc.port
        self.auth = auth  # an authorization header line (or nothing) that gets a request to its body

    def client(self) -> RawClient:
        return RawClient(self.port, timeout=10)

    def head(self, length: int | None = None, *, extra: bytes = b"") -> bytes:
        framing = b"transfer-encoding: chunked\r\n" if length is None else b"content-length: %d\r\n" % length
        return (b"POST " + PATH.encode() + b" HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                + self.auth + framing + extra + b"\r\n")

    def still_serves(self) -> None:
        status = httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=10).status_code
        assert status == 200


def _gateway_policy(tmp: Path) -> dict[str, object]:
    return {
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0, "load_protection": False,
                    "max_body_bytes": MAX_BODY_BYTES,
                    "http": {"head_timeout_s": HEAD_TIMEOUT_S, "body_timeout_s": BODY_TIMEOUT_S,
                             "idle_timeout_s": IDLE_TIMEOUT_S, "max_head_bytes": MAX_HEAD_BYTES,
                             "max_headers": MAX_HEADERS}},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        # nothing listens there: no request of these tests gets that far
        "backends": [{"name": "nowhere", "url": "http://127.0.0.1:9/v1", "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 4096, "kv_capacity_tokens": 4096}}],
        "tenants": [{"name": "t", "key_sha256": hash_api_key(KEY), "organization": "acme", "default_class": "public"}],
    }


@pytest.fixture(scope="module", params=["serve", pytest.param("serve-disagg", marks=pytest.mark.slow), "gateway",
                                        "gateway-workers"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp(f"limits-{request.param}")
    proc: Process
    if request.param.startswith("serve"):
        disagg = ["--disagg"] if request.param == "serve-disagg" else []
        proc = KvfenceServe(tmp, *disagg, "--head-timeout", str(HEAD_TIMEOUT_S), "--body-timeout", str(BODY_TIMEOUT_S),
                            "--idle-timeout", str(IDLE_TIMEOUT_S), "--max-head-bytes", str(MAX_HEAD_BYTES),
                            "--max-headers", str(MAX_HEADERS), "--max-body-bytes", str(MAX_BODY_BYTES))
        auth = b""
    else:
        extra = ["--workers", "2"] if request.param == "gateway-workers" else []
        proc = Gateway(_gateway_policy(tmp), tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32}, extra=extra)
        auth = b"authorization: Bearer " + KEY.encode() + b"\r\n"
        deadline = time.monotonic() + 60
        while True:  # every worker up: /health answers on the port
            try:
                if httpx.get(f"http://127.0.0.1:{proc.port}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp / "gateway.log").read_text()
            time.sleep(0.2)
    yield Target(request.param, proc, auth)
    proc.stop()


def _refused(client: RawClient, status: int) -> dict[str, object]:
    got, _, body = client.read_response()
    assert got == status, body
    error = json.loads(body)["error"]
    assert isinstance(error["message"], str) and error["type"]
    assert client.is_closed(wait=5)
    return dict(error)


def test_an_oversize_request_head_is_refused_before_it_is_read_whole(target: Target) -> None:
    client = target.client()
    big = b"x-pad: " + b"a" * (MAX_HEAD_BYTES * 4) + b"\r\n"
    with contextlib.suppress(OSError):  # the server may close before it took every byte: the answer stays readable
        client.send(target.head(2, extra=big) + b"{}")
    assert _refused(client, 431)["code"] == "request_header_fields_too_large"
    client.close()
    target.still_serves()


def test_an_oversize_head_in_many_small_fields_is_refused(target: Target) -> None:
    client = target.client()
    size = MAX_HEAD_BYTES * 3 // (MAX_HEADERS // 2)  # half the field count allowed, three times the bytes
    many = b"".join(b"x-f%d: %s\r\n" % (i, b"b" * size) for i in range(MAX_HEADERS // 2))
    client.send(b"GET /health HTTP/1.1\r\nhost: x\r\n" + many + b"\r\n")
    error = _refused(client, 431)
    assert str(MAX_HEAD_BYTES) in str(error["message"])
    client.close()


def test_too_many_header_fields_are_refused(target: Target) -> None:
    client = target.client()
    fields = b"".join(b"x-h%d: 1\r\n" % i for i in range(MAX_HEADERS + 5))
    client.send(b"GET /health HTTP/1.1\r\nhost: x\r\n" + fields + b"\r\n")
    error = _refused(client, 431)
    assert str(MAX_HEADERS) in str(error["message"])
    client.close()
    target.still_serves()


def test_a_slowloris_head_is_cut_off_although_bytes_keep_coming(target: Target) -> None:
    client = target.client()
    started = time.monotonic()
    client.send(b"GET /health HTTP/1.1\r\nhost: x\r\n")
    status = None
    while time.monotonic() - started < HEAD_TIMEOUT_S * 6:
        try:
            client.send(b"x-a: b\r\n")  # one more field, well under every size limit, every 0.2 s
        except OSError:
            break
        time.sleep(0.2)
        if client.is_closed(wait=0):
            break
    elapsed = time.monotonic() - started
    assert elapsed < HEAD_TIMEOUT_S * 5, "the server kept reading a head that never ends"
    if client.buffer:
        status = int(client.buffer.split(b" ", 2)[1])
        assert status == 408
    client.close()
    target.still_serves()


def test_a_slow_body_is_cut_off_with_a_408(target: Target) -> None:
    client = target.client()
    client.send(target.head(200))
    started = time.monotonic()
    error: dict[str, object] | None = None
    for _ in range(int(BODY_TIMEOUT_S * 6 / 0.2)):
        try:
            client.send(b" ")  # a byte every 0.2 s: a body that would take 40 s
        except OSError:
            break
        time.sleep(0.2)
        if client.is_closed(wait=0):
            break
    assert time.monotonic() - started < BODY_TIMEOUT_S * 5, "the server kept waiting for a trickling body"
    status, _, body = client.read_response()
    assert status == 408, body
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout"
    client.close()
    target.still_serves()


def test_an_idle_connection_is_closed(target: Target) -> None:
    fresh = target.client()  # never sends a byte
    used = target.client()
    used.send(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
    assert used.read_response()[0] == 200
    assert fresh.is_closed(wait=IDLE_TIMEOUT_S * 5) and used.is_closed(wait=IDLE_TIMEOUT_S * 5)
    fresh.close()
    used.close()


def test_a_declared_oversize_body_is_refused_before_it_is_sent(target: Target) -> None:
    client = target.client()
    client.send(target.head(MAX_BODY_BYTES * 1000))  # 4 MB announced, nothing sent
    assert _refused(client, 413)["code"] == "request_too_large"
    client.close()
    target.still_serves()


def test_a_chunked_oversize_body_is_refused(target: Target) -> None:
    client = target.client()
    piece = b"a" * 1024
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(MAX_BODY_BYTES // 1024 + 2))
    with contextlib.suppress(OSError):
        client.send(target.head(None) + chunks)
    assert _refused(client, 413)["code"] == "request_too_large"
    client.close()
    target.still_serves()
