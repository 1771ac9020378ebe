"""How a decoded (filtered) stream ends, against a raw backend: the end markers decide, not the socket.

A backend may frame its stream by closing the connection (no length, no chunked encoding). Then a
cut-short answer and a complete one look the same at the HTTP level: the gateway tells them apart by
the stream's own markers. ``finish_reason`` without ``[DONE]`` is a complete answer (some servers never
send ``[DONE]``); neither one is an answer cut short, which must end with an error event, not a
silent success. SSE comments, ``data:`` without a space and CRLF line ends are all valid.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import REPO, Gateway
from tests.gateway.raw_backend import serve_raw

KEY = "kvf-gw-stream-end-key"


def _chunk(text: str, finish: str | None = None) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data:" + json.dumps(body).encode() + b"\r\n\r\n"  # no space after "data:", CRLF line ends


def _answer(conn: socket.socket, prompt: str) -> None:
    out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n: ping\r\n\r\n"
    out += _chunk("Hello ") + _chunk("there")
    if prompt == "complete":
        out += _chunk("", "stop")  # and no [DONE]
    conn.sendall(out)  # "cut": the connection closes with neither marker


@pytest.fixture(scope="module")
def raw_port() -> Iterator[int]:
    with serve_raw(_answer) as port:
        yield port


@pytest.fixture(scope="module")
def gateway(raw_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp: Path = tmp_path_factory.mktemp("gw-stream-end")
    gw = Gateway({
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0},  # protection on
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "raw", "url": f"http://127.0.0.1:{raw_port}/v1", "tier": "shared",
                      "capacity": "policy"}],
        "tenants": [{"name": "t", "key_sha256": hash_api_key(KEY), "organization": "acme", "default_class": "public"}],
    }, tmp, env={"PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),  # this checkout's code
                 "KVFENCE_GATEWAY_SECRET": "stream-end-test-secret-0123456789"})
    yield gw
    gw.stop()


def _stream(gw: Gateway, prompt: str) -> str:
    client = openai.OpenAI(base_url=gw.url, api_key=KEY, max_retries=0)
    stream = client.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": prompt}])
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_finish_reason_without_done_is_a_complete_answer(gateway: Gateway) -> None:
    assert _stream(gateway, "complete") == "Hello there"


def test_a_stream_closed_without_end_markers_ends_with_an_error(gateway: Gateway) -> None:
    with pytest.raises(openai.APIError, match="without a finish_reason or \\[DONE\\]"):
        _stream(gateway, "cut")
