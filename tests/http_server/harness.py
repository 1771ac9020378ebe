"""A :class:`HttpServer` (kvfence.http) on a loopback port, in a thread of its own, for tests that talk raw HTTP to it,
and a small ASGI app whose routes each exercise one server behaviour."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from kvfence.http.server import HotPath, HttpConfig, HttpServer

__all__ = ["RawClient", "TestApp", "running_server"]


class TestApp:
    """Routes: GET /hello, POST /echo (reads the body), POST /reject (413 unread), GET /stream
    (chunks without a length), GET /slow?ms, GET /client, GET /boom, GET /forever (until hang-up)."""

    __test__ = False

    def __init__(self, fail_startup: bool = False, on_shutdown: Any = None) -> None:
        self.events: list[str] = []
        self.on_shutdown = on_shutdown  # an async callable run at lifespan shutdown
        self.fail_startup = fail_startup
        self.hangups = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    if self.fail_startup:
                        await send({"type": "lifespan.startup.failed", "message": "no backend"})
                        return
                    self.events.append("startup")
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if self.on_shutdown is not None:
                        await self.on_shutdown()
                    self.events.append("shutdown")
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path, query = scope["path"], scope["query_string"].decode()
        if path == "/echo":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            await _answer(send, 200, body)
        elif path == "/reject":
            await _answer(send, 413, b'{"error": "too big"}')
        elif path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            for piece in (b"one,", b"two,", b"three"):
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif path == "/slow":
            await asyncio.sleep(int(query or "300") / 1000)
            await _answer(send, 200, b"slow " + query.encode())
        elif path == "/client":
            host, port = scope["client"]
            await _answer(send, 200, f"{host}:{port}".encode())
        elif path == "/boom":
            raise RuntimeError("the app broke")
        elif path == "/forever":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"started", "more_body": True})
            # two receivers at once (a hang-up watch beside the app, say): both must hear the hang-up
            await asyncio.gather(*(self._until_disconnect(receive) for _ in range(int(query or "1"))))
        else:
            await _answer(send, 200 if path == "/hello" else 404, path.encode())


    async def _until_disconnect(self, receive: Receive) -> None:
        message: Message = await receive()
        while message["type"] != "http.disconnect":
            message = await receive()
        self.hangups += 1


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class _Running:
    def __init__(self, server: HttpServer, loop: asyncio.AbstractEventLoop, port: int) -> None:
        self.server = server
        self.loop = loop
        self.port = port
        self.clients: list[RawClient] = []

    def client(self, timeout: float = 5.0) -> RawClient:
        """A raw client to this server, closed when the server's block ends."""
        client = RawClient(self.port, timeout)
        self.clients.append(client)
        return client

    def stop(self) -> None:
        """Begin a graceful shutdown (as SIGTERM does); nothing if the server has ended."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.server.request_stop)


@contextmanager
def running_server(app: Any, *, hot: HotPath | None = None, **config: Any) -> Iterator[_Running]:
    """Serve ``app`` on a free loopback port until the block ends (then shut down gracefully)."""
    server = HttpServer(app, hot=hot, config=HttpConfig(**config))
    ready = threading.Event()
    failure: list[BaseException] = []
    holder: dict[str, asyncio.AbstractEventLoop] = {}

    def main() -> None:
        async def serve() -> None:
            holder["loop"] = asyncio.get_running_loop()
            await server.serve("127.0.0.1", 0, ready=ready.set, signals=False)

        try:
            asyncio.run(serve())
        except BaseException as exc:
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    ready.wait(10)
    if failure:
        raise failure[0]
    assert server.bound is not None
    running = _Running(server, holder["loop"], server.bound[1])
    try:
        yield running
    finally:
        running.stop()
        thread.join(15)
        for client in running.clients:
            client.close()
        assert not thread.is_alive(), "the lean server did not shut down"


class RawClient:
    """A raw TCP client: send bytes, read answers (framed by content-length, chunks or close)."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def read_head(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before a full head: {self.buffer!r}")
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    def read_response(self, *, head_request: bool = False) -> tuple[int, dict[str, str], bytes]:
        status, headers = self.read_head()
        if head_request or status in (204, 304) or status < 200:
            return status, headers, b""
        if "content-length" in headers:
            size = int(headers["content-length"])
            while len(self.buffer) < size:
                if not self._fill():
                    raise ConnectionError("closed inside the body")
            body, self.buffer = self.buffer[:size], self.buffer[size:]
            return status, headers, body
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                while b"\r\n" not in self.buffer:
                    if not self._fill():
                        raise ConnectionError("closed inside a chunk")
                size_line, self.buffer = self.buffer.split(b"\r\n", 1)
                size = int(size_line, 16)
                while len(self.buffer) < size + 2:
                    if not self._fill():
                        raise ConnectionError("closed inside a chunk")
                body += self.buffer[:size]
                self.buffer = self.buffer[size + 2:]
                if size == 0:
                    return status, headers, body
        while self._fill():
            pass
        body, self.buffer = self.buffer, b""
        return status, headers, body

    def is_closed(self, wait: float = 2.0) -> bool:
        """True if the server closes the connection within ``wait`` seconds (unread bytes ignored)."""
        deadline = time.monotonic() + wait
        self.sock.settimeout(0.1)
        try:
            while time.monotonic() < deadline:
                try:
                    if not self.sock.recv(65536):
                        return True
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    return True
            return False
        finally:
            self.sock.settimeout(5.0)

    def close(self) -> None:
        self.sock.close()
