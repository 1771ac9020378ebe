"""The lean server's direct relay (``RelayStream.relay_direct``): upstream bytes written to the client
from the upstream's read callback, a slow client slowing the upstream down, a hang-up closing it."""

from __future__ import annotations

import gc
import socket
import threading
import time
from typing import Any

from starlette.types import Receive, Scope

from kvfence.gateway.transport.fast_pool import FastUpstream
from kvfence.gateway.transport.stream_out import RelayStream
from tests.http_server.harness import TestApp, running_server

PIECE = b"data: " + b"x" * 65530 + b"\n\n"  # 64 KiB per SSE event
DONE = b"data: [DONE]\n\n"  # a whole stream ends with it: the relay checks (stream_end.py)


class Upstream:
    """A blocking upstream that streams ``pieces`` SSE events as fast as TCP lets it."""

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self.sent = 0
        self.broken = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                for _ in range(self.pieces):
                    conn.sendall(b"%x\r\n%s\r\n" % (len(PIECE), PIECE))
                    self.sent += len(PIECE)
                conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(DONE), DONE))
                conn.recv(1)  # until the gateway closes or reuses it
            except OSError:
                self.broken.set()

    def close(self) -> None:
        self.listener.close()


class RelayHot:
    """A hot path that relays ``POST /relay`` from the upstream, as the gateway's request path does."""

    def __init__(self, upstream_port: int) -> None:
        self.url = f"http://127.0.0.1:{upstream_port}"
        self.pool: FastUpstream | None = None
        self.closes: list[bool] = []

    async def __call__(self, scope: Scope, receive: Receive) -> Any:
        if scope["path"] != "/relay":
            return None
        while (await receive()).get("more_body"):
            pass
        if self.pool is None:
            self.pool = FastUpstream(self.url)
        upstream = await self.pool.post("/stream", b"{}", {})

        async def on_close(client_gone: bool) -> None:
            await upstream.aclose()
            self.closes.append(client_gone)

        return RelayStream(upstream, on_close, lambda exc: b"data: {\"error\": 1}\n\n", None, status_code=200,
                           media_type="text/event-stream", raw_headers=[(b"content-type", b"text/event-stream")])


    async def aclose(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()


def _wait_for(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


def test_a_slow_client_pauses_the_upstream_and_still_gets_every_byte() -> None:
    upstream = Upstream(pieces=512)  # 32 MiB
    hot = RelayHot(upstream.port)
    try:
        with running_server(TestApp(on_shutdown=hot.aclose), hot=hot) as srv:
            client = srv.client(timeout=30)
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            client.send(b"POST /relay HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            time.sleep(1.0)  # the client reads nothing: the gateway must stop reading the upstream
            held_back = upstream.sent
            assert held_back < 16 * 1024 * 1024, f"{held_back} bytes left the upstream while the client read none"
            status, headers = client.read_head()
            assert status == 200 and headers["transfer-encoding"] == "chunked"
            raw = bytearray(client.buffer)
            while not raw.endswith(b"\r\n0\r\n\r\n"):
                data = client.sock.recv(1 << 20)
                assert data, "the stream ended early"
                raw += data
            assert raw.count(b"data: x") == 512 and raw.count(b"data: ") == 513 and b"[DONE]" in raw and raw.count(b"x") == 512 * (len(PIECE) - 8)
            assert _wait_for(lambda: hot.closes == [False])
    finally:
        upstream.close()


def test_a_client_hang_up_mid_stream_closes_the_upstream() -> None:
    upstream = Upstream(pieces=100000)  # more than anyone reads
    hot = RelayHot(upstream.port)
    try:
        with running_server(TestApp(on_shutdown=hot.aclose), hot=hot) as srv:
            client = srv.client(timeout=30)
            client.send(b"POST /relay HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            client.read_head()
            client.close()
            assert _wait_for(lambda: hot.closes == [True])  # ended as a hang-up, cleaned up
            assert upstream.broken.wait(10)  # and the upstream learned: its connection was closed
    finally:
        upstream.close()


def test_a_finished_relayed_request_leaves_no_reference_cycle() -> None:
    # The hang-up watch and the request's cycle point at each other (its callback, its receive); left
    # so, every request becomes cyclic garbage that only a collection pass frees, and those passes are
    # pauses every stream in flight waits through. A finished request must be freed by reference counts.
    from kvfence.gateway.transport.hang_up import HangUpWatch
    from kvfence.http.cycle import RequestCycle

    upstream = Upstream(pieces=2)
    hot = RelayHot(upstream.port)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with running_server(TestApp(on_shutdown=hot.aclose), hot=hot) as srv:
            client = srv.client(timeout=30)
            client.send(b"POST /relay HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            status, _ = client.read_head()
            raw = bytearray(client.buffer)
            while not raw.endswith(b"\r\n0\r\n\r\n"):
                data = client.sock.recv(1 << 20)
                assert data, "the stream ended early"
                raw += data
            assert status == 200 and b"[DONE]" in raw
            assert _wait_for(lambda: hot.closes == [False])
            # the next request on the connection: the server lets go of the first one's cycle
            client.buffer = bytes(raw[raw.index(b"\r\n0\r\n\r\n") + 7:])
            client.send(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
            assert client.read_head()[0] == 200
            time.sleep(0.2)  # the first request's task ended after its on_close
            gc.collect()
            cyclic = [type(o).__name__ for o in gc.garbage if isinstance(o, RequestCycle | HangUpWatch)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        upstream.close()
    assert cyclic == []
