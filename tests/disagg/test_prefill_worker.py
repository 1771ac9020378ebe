"""The prefill worker as a black box over ZeroMQ: admission (I3) answers REJECT before allocating,
and no malformed message takes it down."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from kvfence.disagg.prefill_worker import PrefillWorker
from kvfence.disagg.protocol import Manifest, submit_mac
from kvfence.disagg.wire import Message, MessageKind, decode, encode
from kvfence.engine.config import EngineConfig
from tests.disagg.conftest import WORKER_MAX_MODEL_LEN, WorkerHandle
from tests.disagg.helpers import KEY

GOOD_PARAMS = {"max_tokens": 4, "temperature": 0.0}


@pytest.fixture
def sock(shared_worker: WorkerHandle) -> Iterator[zmq.Socket[Any]]:
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(shared_worker.address)
    yield s
    s.close(0)
    ctx.term()


def _recv_until(s: zmq.Socket[Any], kind: MessageKind, timeout_s: float = 20.0) -> Message:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if s.poll(100):
            msg = decode(s.recv_multipart())
            if msg.kind is kind:
                return msg
    raise TimeoutError(f"no {kind.name}")


def _submit(s: zmq.Socket[Any], rid: str, key: bytes = KEY, **fields: Any) -> None:
    body = {"request_id": rid, "prompt_token_ids": [5, 6, 7], "params": GOOD_PARAMS, "scope_key": "aa" * 16, **fields}
    s.send_multipart(encode(MessageKind.SUBMIT, {**body, "mac": submit_mac(body, key)}))


@pytest.mark.parametrize(
    ("fields", "error_type", "fragment"),
    [
        ({"prompt_token_ids": []}, "InvalidParameterError", "at least one token"),
        ({"prompt_token_ids": [1, 99999]}, "InvalidParameterError", "vocabulary"),
        ({"prompt_token_ids": "abc"}, "InvalidParameterError", "at least one token"),
        ({"params": {"max_tokens": 0}}, "InvalidParameterError", "max_tokens"),
        ({"params": {"temperature": "hot"}}, "InvalidParameterError", "temperature"),
        ({"params": {"bogus": 1}}, "InvalidParameterError", "unknown sampling parameters"),
        ({"params": None}, "InvalidParameterError", "missing"),
        ({"scope_key": "zz"}, "InvalidParameterError", "scope_key"),
        ({"scope_key": ""}, "InvalidParameterError", "scope_key"),
        ({"params": {"max_tokens": WORKER_MAX_MODEL_LEN}}, "ContextLengthExceededError", "maximum context length"),
    ],
)
def test_bad_submissions_are_rejected_explicitly(sock: zmq.Socket[Any], fields: dict[str, Any], error_type: str, fragment: str) -> None:
    _submit(sock, "bad", **fields)
    reject = _recv_until(sock, MessageKind.REJECT)
    assert reject.request_id == "bad"
    assert reject.fields["error"]["type"] == error_type
    assert fragment in reject.fields["error"]["message"]


@pytest.mark.parametrize("mac", ["missing", "unkeyed", "other key", "other body"])
def test_a_submit_not_signed_with_the_handoff_key_is_rejected(sock: zmq.Socket[Any], mac: str) -> None:
    """I4/I5: without the key, no prefill, no KV, no prefix-hit flags of any scope."""
    body: dict[str, Any] = {"request_id": "unsigned", "prompt_token_ids": [5, 6, 7], "params": GOOD_PARAMS,
                            "scope_key": "aa" * 16}
    if mac != "missing":
        signed = {**body, "prompt_token_ids": [5, 6, 8]} if mac == "other body" else body
        body["mac"] = submit_mac(signed, {"unkeyed": b"", "other key": b"k" * 32}.get(mac, KEY))
    sock.send_multipart(encode(MessageKind.SUBMIT, body))
    reject = _recv_until(sock, MessageKind.REJECT)
    assert reject.request_id == "unsigned"
    assert "handoff key" in reject.fields["error"]["message"]


def test_garbage_does_not_take_the_worker_down(sock: zmq.Socket[Any]) -> None:
    for frames in ([b""], [b"KVFD"], [b"XXXX\x00\x01\x03{}"], [b"KVFD\x00\x01\x63{}"], [b"KVFD\x00\x01\x03[1,2]"],
                   encode(MessageKind.ABORT, {"request_id": "never-submitted"}), encode(MessageKind.COMMIT, {}),
                   encode(MessageKind.SUBMIT, {"request_id": 5}), encode(MessageKind.PAGE, {"request_id": "x"}, [b"\0" * 9])):
        sock.send_multipart(frames)
    _submit(sock, "after-garbage")
    manifest = Manifest.from_wire(_recv_until(sock, MessageKind.MANIFEST).fields)
    assert manifest.request_id == "after-garbage" and manifest.prompt_len == 3 and manifest.page_count == 1
    assert _recv_until(sock, MessageKind.COMMIT).fields["page_count"] == 1


def test_duplicate_request_id_in_flight_is_rejected(model_dir: Path) -> None:
    """In-process worker, driven by hand, so the first request is certainly still in flight."""
    worker = PrefillWorker(EngineConfig(model=str(model_dir), kv_cache_tokens=256, max_model_len=256, num_threads=1),
                           listen="tcp://127.0.0.1:*")
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(worker.endpoint)
        _submit(s, "twice", key=b"")  # an unkeyed worker: the MAC is a plain digest
        _submit(s, "twice", key=b"")
        deadline = time.monotonic() + 20
        while not s.poll(10) and time.monotonic() < deadline:
            worker._drain()  # messages only; no prefill step runs, so "twice" stays in flight
        reject = _recv_until(s, MessageKind.REJECT)
        assert "already in use" in reject.fields["error"]["message"]
        while worker.scheduler.has_unfinished():
            worker.step()
        assert Manifest.from_wire(_recv_until(s, MessageKind.MANIFEST).fields).request_id == "twice"
        assert not s.poll(200) or decode(s.recv_multipart()).kind is MessageKind.PAGE
        assert worker.num_handoffs == 1 and worker.num_rejected == 1
        assert worker.engine.pool_is_zero()  # the prompt pages were released and zeroed (I2)
    finally:
        s.close(0)
        ctx.term()
        worker.close()
