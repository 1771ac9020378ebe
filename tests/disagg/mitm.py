"""A man in the middle on real ZeroMQ sockets: decode <-> MITM <-> prefill worker.

Each direction has a hook that sees every message (decoded) and returns the frames to forward
(none, the same, changed ones, or extra ones). It runs in its own thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import zmq

from kvfence.disagg.wire import Message, decode
from tests.netutil import free_port

__all__ = ["Hook", "Mitm"]

Hook = Callable[[Message, list[bytes]], list[list[bytes]]]


def _forward(_: Message, frames: list[bytes]) -> list[list[bytes]]:
    return [frames]


class Mitm:
    def __init__(self, upstream: str) -> None:
        self._ctx = zmq.Context()
        self.front = self._ctx.socket(zmq.ROUTER)
        self.front.setsockopt(zmq.LINGER, 0)
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.front.bind(self.address)
        self.back = self._ctx.socket(zmq.DEALER)
        self.back.setsockopt(zmq.LINGER, 0)
        self.back.connect(upstream)
        self.to_decode: Hook = _forward
        self.to_prefill: Hook = _forward
        self.seen_to_decode: list[Message] = []
        self.seen_to_prefill: list[Message] = []
        self._identity: bytes | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def kinds_to_decode(self) -> list[str]:
        with self._lock:
            return [m.kind.name for m in self.seen_to_decode]

    def kinds_to_prefill(self) -> list[str]:
        with self._lock:
            return [m.kind.name for m in self.seen_to_prefill]

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.front, zmq.POLLIN)
        poller.register(self.back, zmq.POLLIN)
        while not self._stop.is_set():
            for sock, _ in poller.poll(20):
                if sock is self.front:
                    identity, *frames = self.front.recv_multipart()
                    self._identity = identity
                    msg = decode(frames)
                    with self._lock:
                        self.seen_to_prefill.append(msg)
                    for out in self.to_prefill(msg, frames):
                        self.back.send_multipart(out)
                else:
                    frames = self.back.recv_multipart()
                    msg = decode(frames)
                    with self._lock:
                        self.seen_to_decode.append(msg)
                    for out in self.to_decode(msg, frames):
                        if self._identity is not None:
                            self.front.send_multipart([self._identity, *out])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.front.close(0)
        self.back.close(0)
        self._ctx.term()
