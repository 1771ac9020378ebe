"""Attack on the audit log: a close-framed stream whose client leaves after ``[DONE]`` is a complete answer.

A backend that frames its stream by closing the connection ends the body only when it closes, which
may come well after the stream's last event. The ``openai`` client closes its response as soon as it
reads ``[DONE]``, so the gateway sees the client go while its upstream is still open. The answer was
delivered whole: the audit log must say 200 / ok (and the stream's tokens are charged), not 499 /
client_gone. A client that leaves before the end is still a hang-up (499). Every relay path runs:
both HTTP servers, both upstream clients, and the decoded path (a token-metered tenant).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway
from tests.gateway.raw_backend import serve_raw

KEYS = {"relay": "kvf-gw-done-relay-key", "metered": "kvf-gw-done-metered-key"}
HOLD_S = 5.0  # how long the backend keeps its connection open after the stream's last event (long, so a loaded machine still shows the client leaving first)


def _event(text: str, finish: str | None = None) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


_USAGE = b"data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                 "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                          "total_tokens": 5}}).encode() + b"\n\n"


def _answer(conn: socket.socket, prompt: str) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
                 + _event("Hello "))
    if prompt == "slow":  # the client leaves in this pause, before the end
        time.sleep(HOLD_S)
    conn.sendall(_event("there") + _event("", "stop") + _USAGE + b"data: [DONE]\n\n")
    time.sleep(HOLD_S)  # the end is out; the body ends only when this connection closes


@pytest.fixture(scope="module")
def raw_backend() -> Iterator[str]:
    with serve_raw(_answer) as port:
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module", params=["auto", "httpx"])
def gateway(request: pytest.FixtureRequest, raw_backend: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    client = request.param
    tmp = tmp_path_factory.mktemp("gw-done")
    audit = tmp / "audit.db"
    gw = Gateway({
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "raw", "url": raw_backend, "tier": "shared", "capacity": "policy",
                      "http_client": client}],
        "tenants": [{"name": name, "key_sha256": hash_api_key(key), "organization": "acme", "workspace": name,
                     "default_class": "public",
                     "limits": {"tokens_per_minute": 100000} if name == "metered" else {}}
                    for name, key in KEYS.items()],
    }, tmp)
    yield gw, audit
    gw.stop()


def _last_row(audit: Path, tenant: str, after: int) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        conn = sqlite3.connect(audit)
        conn.row_factory = sqlite3.Row
        try:
            rows = conn.execute("SELECT * FROM gateway_decisions WHERE tenant = ? AND id > ? ORDER BY id",
                                (tenant, after)).fetchall()
        except sqlite3.OperationalError:
            rows = []
        finally:
            conn.close()
        if rows:
            assert len(rows) == 1
            return dict(rows[0])
        time.sleep(0.05)
    raise AssertionError(f"no audit row for {tenant}")


def _max_id(audit: Path) -> int:
    try:
        with sqlite3.connect(audit) as conn:
            return int(conn.execute("SELECT coalesce(max(id), 0) FROM gateway_decisions").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


@pytest.mark.parametrize("tenant", ["relay", "metered"])
def test_a_client_that_leaves_after_done_got_a_complete_answer(gateway: tuple[Gateway, Path], tenant: str) -> None:
    gw, audit = gateway
    before = _max_id(audit)
    client = openai.OpenAI(base_url=gw.url, api_key=KEYS[tenant], max_retries=0)
    started = time.monotonic()
    with client.chat.completions.create(model="m", stream=True,
                                        messages=[{"role": "user", "content": "hi"}]) as stream:
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    client.close()
    assert text == "Hello there"
    assert time.monotonic() - started < HOLD_S  # the client left before the upstream closed
    row = _last_row(audit, tenant, before)
    assert (row["status"], row["outcome"]) == (200, "ok"), row


@pytest.mark.parametrize("tenant", ["relay", "metered"])
def test_a_client_that_leaves_before_the_end_is_still_a_hang_up(gateway: tuple[Gateway, Path], tenant: str) -> None:
    gw, audit = gateway
    before = _max_id(audit)
    with httpx.Client(timeout=10) as client, client.stream(
            "POST", gw.url + "/chat/completions", headers={"authorization": f"Bearer {KEYS[tenant]}"},
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "slow"}]}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                break  # the first event, then leave
    row = _last_row(audit, tenant, before)
    assert (row["status"], row["outcome"]) == (499, "client_gone"), row
