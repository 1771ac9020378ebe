"""No Nagle wait on kvfence.http's connections: TCP_NODELAY on every socket the server accepts and the
gateway's lean client opens, on uvloop and on asyncio's own loop, with the listening socket made the
way ``kvfence serve`` / ``kvfence gateway`` make it (``kvfence.listen``: ``proto`` 0, which asyncio's
loop does not recognise as TCP). Before ``kvfence/http/tcp.py`` a streamed answer on asyncio's loop
held each event written while the one before was unacknowledged: gaps of ~40 ms (the peer's delayed
ACK) between events sent 1 ms apart."""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import uvloop
from starlette.types import Receive, Scope, Send

from kvfence.gateway.transport.fast_pool import FastUpstream
from kvfence.http.server import HttpConfig, HttpServer
from kvfence.listen import bind_listening_socket

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
PIECES = 5
GAP_S = 0.001


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["path"] == "/stream":  # small SSE-sized pieces, GAP_S apart (a model decoding fast)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for index in range(PIECES):
            await send({"type": "http.response.body", "body": b"data: %d\n\n" % index, "more_body": True})
            await asyncio.sleep(GAP_S)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    body = b'{"ok": true}'
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


@contextmanager
def _serving(loop_name: str) -> Iterator[tuple[HttpServer, int]]:
    """An HttpServer on ``loop_name``'s loop, on a listening socket bound as the CLI binds it."""
    sock = bind_listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = HttpServer(_app, config=HttpConfig())
    ready = threading.Event()

    def main() -> None:
        with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
            runner.run(server.serve(sock=sock, ready=ready.set, signals=False))

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(10), "the server did not start"
    try:
        yield server, port
    finally:
        server.request_stop_threadsafe()
        thread.join(15)
        sock.close()
        assert not thread.is_alive(), "the server did not shut down"


def _nodelay(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@pytest.mark.parametrize("loop_name", list(LOOPS))
def test_every_accepted_connection_has_nodelay(loop_name: str) -> None:
    with _serving(loop_name) as (server, port), socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        client.sendall(b"GET /hello HTTP/1.1\r\nhost: t\r\n\r\n")
        assert client.recv(65536).startswith(b"HTTP/1.1 200 ")
        (conn,) = server.connections
        transport = conn._transport
        assert transport is not None
        assert _nodelay(transport.get_extra_info("socket")) == 1


@pytest.mark.parametrize("loop_name", list(LOOPS))
def test_a_streamed_answer_is_not_held_between_events(loop_name: str) -> None:
    # What Nagle did here: from a connection's second answer on, every event after the first waited
    # for the client's delayed ACK and came ~40 ms later, in one lump with the rest. Measured: the
    # time from each answer's first event to its second (written 1 ms apart), median over the answers.
    seconds: list[float] = []
    with _serving(loop_name) as (_, port), socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        for _ in range(8):
            client.sendall(b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n")
            received, first = b"", 0.0
            while not received.endswith(b"0\r\n\r\n"):
                data = client.recv(65536)
                assert data, "the server closed inside the answer"
                now = time.perf_counter()
                before, received = received.count(b"data: "), received + data
                count = received.count(b"data: ")
                if before == 0 and count > 0:
                    first = now
                if before < 2 <= count:
                    seconds.append(now - first)
    late = statistics.median(seconds[1:])  # the first answer: the client's ACKs are still quick
    assert late < 0.015, (f"the second event came {late * 1000:.1f} ms after the first (median over "
                          f"{len(seconds) - 1} answers; written 1 ms apart): writes wait for ACKs (Nagle)")


@pytest.mark.parametrize("loop_name", list(LOOPS))
def test_the_lean_clients_upstream_connections_have_nodelay(loop_name: str) -> None:
    with _serving("uvloop") as (_, port):
        async def check() -> int:
            client = FastUpstream(f"http://127.0.0.1:{port}/v1")
            try:
                response = await client.post("/hello", b"{}", {"content-type": "application/json"})
                await response.aread()
                (conn,) = client._all
                assert conn._transport is not None
                return _nodelay(conn._transport.get_extra_info("socket"))
            finally:
                await client.aclose()

        with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
            assert runner.run(check()) == 1
