"""End to end: tokens per minute and client hang-ups, the official ``openai`` client against a real
``kvfence gateway`` process in front of a real backend process on loopback."""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httptools
import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import FakeBackend, Gateway, metrics_text, openai_client, with_metrics_key

WINDOW_S = 3.0  # gateway.limit_window_s: a short window so that the test can watch it slide
KEYS = {name: f"kvf-gw-limits-{name}-key" for name in ("tpm", "neighbour", "asks", "nousage", "single")}
# The fake backend reports 7 completion tokens per answer; the approximate counter charges a prompt of
# "hi" as ceil(2/3) + 4 + 3 = 8 tokens. One request therefore costs 15 tokens.
PER_REQUEST = 15


def policy(backend: FakeBackend, audit: Path) -> dict[str, Any]:
    def tenant(name: str, **limits: int) -> dict[str, Any]:
        return {"name": name, "key_sha256": hash_api_key(KEYS[name]), "organization": "acme", "workspace": name,
                "default_class": "public", "limits": limits}

    return {
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0, "load_protection": False,
                    "limit_window_s": WINDOW_S},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "fake", "url": backend.url, "tier": "shared", "capacity": "policy"}],
        "tenants": [tenant("tpm", tokens_per_minute=2 * PER_REQUEST + 5),
                    tenant("neighbour", tokens_per_minute=2 * PER_REQUEST + 5),
                    tenant("asks", tokens_per_minute=1000), tenant("nousage", tokens_per_minute=1000),
                    tenant("single", max_concurrent=1)],
    }


@pytest.fixture(scope="module")
def backend() -> Iterator[FakeBackend]:
    b = FakeBackend("limits-backend")
    yield b
    b.stop()


@pytest.fixture(scope="module", params=["auto", "httpx"])
def gateway(request: pytest.FixtureRequest, backend: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw-limits")
    p = policy(backend, tmp / "audit.db")
    for b in p["backends"]:
        b["http_client"] = request.param
    gw = Gateway(with_metrics_key(p, tmp), tmp)
    yield gw
    gw.stop()


def client(gw: Gateway, tenant: str) -> openai.OpenAI:
    return openai_client(gw.url, KEYS[tenant], max_retries=0)


def stream_chat(c: openai.OpenAI, **kw: Any) -> list[Any]:
    stream = c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}],
                                       stream=True, **kw)
    return list(stream)


def metric(gw: Gateway, name: str, **labels: str) -> float:
    text = metrics_text(gw.root)
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == name and ",".join(sorted(m.group(2).split(","))) == want:
            return float(m.group(3))
    return 0.0


def test_tokens_per_minute_refuses_then_the_window_slides(gateway: Gateway, backend: FakeBackend) -> None:
    c, neighbour = client(gateway, "tpm"), client(gateway, "neighbour")
    time.sleep(WINDOW_S)  # a fresh window (the module runs once per upstream client)
    backend.clear()
    chunks = stream_chat(c)
    # the gateway asked for usage on the tenant's behalf, and the client never saw that chunk
    assert backend.received()[-1]["body"]["stream_options"] == {"include_usage": True}
    assert all(ch.choices for ch in chunks) and all(getattr(ch, "usage", None) is None for ch in chunks)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "hello from limits-backend"
    c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}])  # not streamed
    with pytest.raises(openai.RateLimitError) as err:  # 30 of 35 tokens used: a prompt of 8 does not fit
        stream_chat(c)
    body = err.value.response.json()["error"]
    assert body["code"] == "tokens_per_minute_exceeded" and "35 tokens per minute" in body["message"]
    assert 1 <= int(err.value.response.headers["retry-after"]) <= WINDOW_S
    stream_chat(neighbour)  # another tenant is not affected
    assert metric(gateway, "kvfence_gateway_tokens_total", tenant="tpm", kind="completion", source="usage") == 14
    assert metric(gateway, "kvfence_gateway_tokens_total", tenant="tpm", kind="prompt", source="count") == 16
    assert metric(gateway, "kvfence_gateway_rejections_total", reason="tokens_per_minute_exceeded") >= 1
    time.sleep(WINDOW_S + 0.2)  # the window slides: the tenant's tokens have left it
    assert len(stream_chat(c)) > 1


def test_usage_the_client_asked_for_is_passed_on(gateway: Gateway) -> None:
    chunks = stream_chat(client(gateway, "asks"), stream_options={"include_usage": True})
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == 7


def test_without_usage_the_answer_text_is_counted(gateway: Gateway, backend: FakeBackend) -> None:
    backend.control(usage=False)
    try:
        before = metric(gateway, "kvfence_gateway_tokens_total", tenant="nousage", kind="completion", source="count")
        stream_chat(client(gateway, "nousage"))
        client(gateway, "nousage").chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "hi"}])
    finally:
        backend.control(usage=True)
    # "hello from limits-backend" is 25 bytes: the approximation charges ceil(25 / 3) = 9, twice
    after = metric(gateway, "kvfence_gateway_tokens_total", tenant="nousage", kind="completion", source="count")
    assert after - before == 18


def test_a_prompt_over_the_whole_limit_is_429_without_retry_after(gateway: Gateway) -> None:
    with pytest.raises(openai.RateLimitError) as err:
        client(gateway, "tpm").chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "x" * 300}])
    assert "request too large" in err.value.response.json()["error"]["message"]
    assert "retry-after" not in err.value.response.headers


def _start_request_and_hang_up(gw: Gateway, tenant: str) -> None:
    body = b'{"model": "test-model", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {KEYS[tenant]}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(head + body)
        time.sleep(0.5)  # the gateway has forwarded it; the backend sits on it


def test_hang_up_before_the_first_byte_cancels_upstream_and_frees_the_slot(
        gateway: Gateway, backend: FakeBackend) -> None:
    backend.clear()
    backend.control(delay_s=5.0)
    try:
        started = time.monotonic()
        _start_request_and_hang_up(gateway, "single")
        # the tenant's only concurrency slot is free again well before the backend would have answered
        deadline = time.monotonic() + 3
        while True:
            text = metrics_text(gateway.root)
            if "kvfence_gateway_in_flight 0.0" in text or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert "kvfence_gateway_in_flight 0.0" in text
        assert time.monotonic() - started < 4.5
        # and the backend saw its client (the gateway) go away: the upstream request was abandoned
        deadline = time.monotonic() + 3
        while not backend.received()[-1].get("client_disconnected") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert backend.received()[-1].get("client_disconnected")
    finally:
        backend.control(delay_s=0.0)
    answer = client(gateway, "single").chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "hello from limits-backend"
    audit = gateway.config.parent / "audit.db"
    rows = []
    deadline = time.monotonic() + 5
    while not rows and time.monotonic() < deadline:  # the audit log is written by a background thread
        with sqlite3.connect(audit) as db:
            rows = db.execute("SELECT status, outcome FROM gateway_decisions WHERE tenant = 'single' AND "
                              "outcome = 'client_gone'").fetchall()
        time.sleep(0.05)
    assert rows == [(499, "client_gone")]


def test_a_slow_client_gets_the_whole_relayed_stream(gateway: Gateway, backend: FakeBackend) -> None:
    # 8 MB of answer to a client with a small receive buffer that stops reading for a while: the
    # gateway's sends are held back, reading from the backend pauses, and nothing is lost or reordered.
    reply = "".join(f"{i:07d}" for i in range(8_000_000 // 7))
    backend.control(reply=reply, chunk_chars=20_000)
    try:
        body = json.dumps({"model": "test-model", "stream": True,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                f"authorization: Bearer {KEYS['single']}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        received: list[bytes] = []
        done: list[bool] = []

        class Answer:
            def on_body(self, data: bytes) -> None:
                received.append(data)

            def on_message_complete(self) -> None:
                done.append(True)

        parser = httptools.HttpResponseParser(Answer())
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", gateway.port))
            sock.sendall(head + body)
            time.sleep(1.5)
            sock.settimeout(30)
            while not done:
                data = sock.recv(65536)
                assert data, "the gateway closed the connection early"
                parser.feed_data(data)
                time.sleep(0.001)  # and keep reading slowly
        assert parser.get_status_code() == 200
        text = []
        for event in b"".join(received).split(b"\n\n"):
            if event.startswith(b"data: {"):
                text.append(json.loads(event[6:])["choices"][0]["delta"].get("content") or "")
        assert "".join(text) == reply
    finally:
        backend.control(reply="hello from limits-backend", chunk_chars=4)
