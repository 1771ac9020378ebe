"""Attack: a raw-socket backend cuts its answer short every way; the gateway never passes it as complete.

A relayed stream (no scanners, no token limit: the upstream's bytes go out as they came) is the path
where nothing parses the events, so it is the one that could miss a cut. The backend cuts a streamed
answer mid-chunk and between chunks of a chunked body, ends a chunked body cleanly but before the
stream's end, and closes a close-framed body (no length, no chunked coding) mid-event and before
[DONE]; a whole answer is cut inside a close-framed, chunked and length-framed body. Each cut must
reach the client as an error (an error event after what was relayed, or a 503), be logged as
``upstream_error``, and, for a token-limited tenant, the tokens generated before the cut are charged.
Every case runs on both HTTP servers and both upstream clients; complete answers still pass.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway
from tests.gateway.raw_backend import serve_raw

KEYS = {"relay": "kvf-gw-cut-relay-key", "metered": "kvf-gw-cut-metered-key"}
_OK = b"HTTP/1.1 200 OK\r\n"


def _event(text: str, finish: str | None = None) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


_EVENTS = [_event("Hello "), _event("there")]
_COMPLETE = [*_EVENTS, _event("", "stop"), b"data: [DONE]\n\n"]
_ANSWER = json.dumps({"id": "c2", "object": "chat.completion", "created": 1, "model": "m",
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there"},
                                   "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode()


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


_SSE_CLOSE = _OK + b"content-type: text/event-stream\r\nconnection: close\r\n\r\n"
_SSE_CHUNKED = _OK + b"content-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
_JSON = b"content-type: application/json\r\nconnection: close\r\n"
# What the backend sends for each prompt, after which it closes the connection.
SCRIPTS: dict[str, bytes] = {
    "stream close complete": _SSE_CLOSE + b"".join(_COMPLETE),
    "stream close mid-event": _SSE_CLOSE + b"".join(_EVENTS) + _event("", "stop")[:30],
    "stream close before done": _SSE_CLOSE + b"".join(_EVENTS),
    "stream chunked complete": _SSE_CHUNKED + _chunked(_COMPLETE) + b"0\r\n\r\n",
    "stream chunked mid-chunk": _SSE_CHUNKED + _chunked(_EVENTS) + b"%x\r\n" % len(_COMPLETE[2])
                                + _COMPLETE[2][:20],
    "stream chunked between chunks": _SSE_CHUNKED + _chunked(_EVENTS),
    "stream chunked ends before done": _SSE_CHUNKED + _chunked(_EVENTS) + b"0\r\n\r\n",
    "whole close complete": _OK + _JSON + b"\r\n" + _ANSWER,
    "whole close cut": _OK + _JSON + b"\r\n" + _ANSWER[: len(_ANSWER) // 2],
    "whole chunked cut": _OK + _JSON + b"transfer-encoding: chunked\r\n\r\n" + _chunked([_ANSWER[:40]]),
    "whole length cut": _OK + _JSON + b"content-length: %d\r\n\r\n" % len(_ANSWER) + _ANSWER[:40],
}
CUT_STREAMS = [k for k in SCRIPTS if k.startswith("stream") and "complete" not in k]
CUT_WHOLE = [k for k in SCRIPTS if k.startswith("whole") and "complete" not in k]


def _answer(conn: socket.socket, prompt: str) -> None:
    conn.sendall(SCRIPTS[prompt])  # then the close: the cut


@pytest.fixture(scope="module")
def raw_backend() -> Iterator[int]:
    with serve_raw(_answer) as port:
        yield port


@pytest.fixture(scope="module", params=["auto", "httpx"])
def gateway(request: pytest.FixtureRequest, raw_backend: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    client = request.param
    tmp: Path = tmp_path_factory.mktemp("gw-cut")
    gw = Gateway({
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "raw", "url": f"http://127.0.0.1:{raw_backend}/v1", "tier": "shared",
                      "capacity": "policy"}],
        "tenants": [
            {"name": "relay", "key_sha256": hash_api_key(KEYS["relay"]), "organization": "acme",
             "default_class": "public"},
            {"name": "metered", "key_sha256": hash_api_key(KEYS["metered"]), "organization": "acme",
             "default_class": "public", "limits": {"tokens_per_minute": 1_000_000}},
        ],
    }, tmp, env={"KVFENCE_GATEWAY_SECRET": "relay-cut-test-secret-0123456789",
                 "KVFENCE_GATEWAY_HTTP_CLIENT": client})
    yield gw
    gw.stop()


def _client(who: str, gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=KEYS[who], max_retries=0)


def _audit_row(gw: Gateway, request_id: str) -> tuple[int, str, str | None, dict[str, object]]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the audit log is written by a background thread
        with sqlite3.connect(gw.config.parent / "audit.db") as db:
            row = db.execute("SELECT status, outcome, reason, annotations FROM gateway_decisions "
                             "WHERE request_id = ?", (request_id,)).fetchone()
        if row is not None:
            return row[0], row[1], row[2], json.loads(row[3])
        time.sleep(0.05)
    raise AssertionError(f"no audit row for {request_id}")


def _stream(gw: Gateway, who: str, script: str) -> tuple[str, str, Exception | None]:
    """(request id, text received, the error the client raised or None)."""
    with _client(who, gw) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", stream=True, messages=[{"role": "user", "content": script}])
        text = ""
        try:
            for chunk in raw.parse():
                text += "".join(c.delta.content or "" for c in chunk.choices)
        except openai.APIError as exc:
            return raw.headers["x-request-id"], text, exc
        return raw.headers["x-request-id"], text, None


@pytest.mark.parametrize("who", ["relay", "metered"])
def test_a_complete_stream_passes(gateway: Gateway, who: str) -> None:
    for script in ("stream close complete", "stream chunked complete"):
        request_id, text, error = _stream(gateway, who, script)
        assert (text, error) == ("Hello there", None), script
        if "chunked" in script:
            # (a close-framed stream ends for the gateway when the backend closes, which may come after
            # the client, having read [DONE], left: then it is logged as the client's hang-up)
            assert _audit_row(gateway, request_id)[:2] == (200, "ok")


@pytest.mark.parametrize("who", ["relay", "metered"])
@pytest.mark.parametrize("script", CUT_STREAMS)
def test_a_cut_stream_ends_with_an_error_event_and_is_logged(gateway: Gateway, who: str, script: str) -> None:
    request_id, text, error = _stream(gateway, who, script)
    assert error is not None, f"{script}: passed on as a complete answer ({text!r})"
    assert "broke off the stream" in str(error)
    assert text.startswith("Hello ")  # what came before the cut was relayed as it came
    status, outcome, reason, annotations = _audit_row(gateway, request_id)
    assert (status, outcome) == (502, "upstream_error") and reason and "stream broke" in reason
    if who == "metered":  # what the backend generated before the cut is charged to the tenant
        tokens = annotations.get("completion_tokens")
        assert isinstance(tokens, int) and tokens > 0


def test_a_complete_close_framed_answer_passes(gateway: Gateway) -> None:
    with _client("relay", gateway) as client:
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "whole close complete"}])
    assert answer.choices[0].message.content == "Hello there"


@pytest.mark.parametrize("who", ["relay", "metered"])
@pytest.mark.parametrize("script", CUT_WHOLE)
def test_a_cut_whole_answer_is_a_502(gateway: Gateway, who: str, script: str) -> None:
    with _client(who, gateway) as client, pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": script}])
    assert err.value.status_code == 503 and "broke off" in str(err.value)  # upstream_unavailable
    status, outcome, _, _ = _audit_row(gateway, err.value.response.headers["x-request-id"])
    assert (status, outcome) == (503, "upstream_error")
