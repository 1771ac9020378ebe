"""One request on a server connection (``connection.py``): its ASGI ``receive``/``send``, and a
direct writer for answers relayed from the upstream's read callback (``stream_out.RelayStream``).

Response framing is decided once, when the head goes out: ``content-length`` when the app gave one,
else chunked transfer coding for HTTP/1.1 clients, else (HTTP/1.0) the body runs to the end of the
connection. A HEAD request and 1xx/204/304 answers get no body bytes, whatever the app sends.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.types import Message, Scope

from kvfence.http import timing_probe
from kvfence.openai_wire import error_bytes, error_type_for

if TYPE_CHECKING:
    from kvfence.http.connection import HttpConnection

__all__ = ["RequestCycle", "error_answer"]

log = logging.getLogger("kvfence.gateway")

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_REASONS = {s.value: s.phrase.encode("ascii") for s in http.HTTPStatus}
_NO_BODY_STATUS = frozenset({204, 304})


def _status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))


def error_answer(status: int, message: str, code: str, *, close: bool = True, date: bytes = b"") -> bytes:
    """A whole OpenAI-shaped JSON error answer, for what the server refuses before any app sees it."""
    body = error_bytes(message, type=error_type_for(status), code=code)
    return b"".join((_status_line(status), b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body),
                     date, b"connection: close\r\n" if close else b"", b"\r\n", body))


class RequestCycle:
    """A parsed request head, its body as it arrives, and the state of its answer."""

    def __init__(self, conn: HttpConnection, scope: Scope, *, keep_alive: bool, expect_continue: bool) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self._expect_continue = expect_continue
        self._is_head = scope["method"] == "HEAD"
        self._http10 = scope["http_version"] == "1.0"
        self.body: list[bytes] = []
        self.body_size = 0  # bytes received and not yet taken by receive()
        self.body_complete = False
        self._body_taken = False  # the last body message went out
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        # receive() callers waiting (the app reading its body, a hang-up watch; more than one at a time
        # is allowed by ASGI)
        self._waiters: list[asyncio.Future[None]] = []
        self._chunked = False
        self._no_body = False
        self._head: bytes | None = None  # written with the first body bytes: one write, not two
        self._on_disconnect: Callable[[], None] | None = None
        self.on_drain: Callable[[], None] | None = None  # the direct relay's resume, while it runs
        self._probe_id: str | None = None

    # -- fed by the connection --------------------------------------------------------------------
    def feed_body(self, data: bytes) -> None:
        self.body.append(data)
        self.body_size += len(data)
        self._wake()

    def end_body(self) -> None:
        self.body_complete = True
        self._wake()

    def lost(self) -> None:
        """The client's connection is gone: receive() now answers ``http.disconnect``."""
        self.disconnected = True
        self._wake()
        callback, self._on_disconnect = self._on_disconnect, None
        if callback is not None and not self.response_complete:
            callback()

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` if the client hangs up before the answer is complete (``HangUpWatch``
        uses this instead of a task waiting in receive())."""
        self._on_disconnect = callback

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    # -- ASGI receive -----------------------------------------------------------------------------
    async def receive(self) -> Message:
        if self._expect_continue and not self.response_started and not self.disconnected:
            # the client waits for this before it sends the body (the app asked for it by receiving)
            self._expect_continue = False
            self.conn.write(_CONTINUE)
        # Once the whole body is taken, the only message left is the disconnect: wait for it.
        while not (self.body or (self.body_complete and not self._body_taken) or self.disconnected
                   or self.response_complete):
            self.conn.body_taken(self)
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        chunks = self.body
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.body = []
        self.body_size = 0
        self.conn.body_taken(self)
        self._body_taken = self.body_complete
        return {"type": "http.request", "body": data, "more_body": not self.body_complete}

    # -- ASGI send --------------------------------------------------------------------------------
    async def send(self, message: Message) -> None:
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {kind!r}")
            self.start(message["status"], message.get("headers", ()))
            return
        if self.response_complete:
            raise RuntimeError(f"{kind!r} sent after the response was complete")
        if kind != "http.response.body":
            raise RuntimeError(f"expected http.response.body, got {kind!r}")
        body = message.get("body", b"")
        if message.get("more_body", False):
            self.write(body)
            if self.conn.write_paused and not self.disconnected:
                await self.conn.drained()
        else:
            self.finish(body)

    # -- the direct writer (stream_out.DirectOut) -------------------------------------------------
    def start(self, status: int, headers: Any) -> None:
        """Encode the response head; it goes out with the first body bytes."""
        self.response_started = True
        conn = self.conn
        if conn.closing or not self.body_complete:
            self.keep_alive = False  # an unread request body cannot be skipped safely: close after
        self._no_body = self._is_head or status < 200 or status in _NO_BODY_STATUS
        lines = [_status_line(status)]
        has_length = has_encoding = False
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                has_length = True
            elif lower == b"transfer-encoding":
                has_encoding = True
            elif lower == b"connection" and value.lower() == b"close":
                self.keep_alive = False
            lines += (name, b": ", value, b"\r\n")
        if not (has_length or has_encoding or self._no_body):
            if self._http10:
                self.keep_alive = False  # no chunked coding in HTTP/1.0: the body ends with the connection
            else:
                self._chunked = True
                lines.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        elif self._http10:
            lines.append(b"connection: keep-alive\r\n")
        lines += (conn.date_header(), b"\r\n")
        self._head = b"".join(lines)
        if timing_probe.enabled():
            self._probe_start(headers)

    def write(self, data: bytes) -> bool:
        """Send a piece of the body; True when the client's buffer is full (stop producing)."""
        if self.disconnected:
            return False
        head, self._head = self._head, None
        if self._no_body or not data:
            if head is not None:
                self.conn.write(head)
        elif self._chunked:
            self.conn.write(b"".join((head or b"", b"%x\r\n" % len(data), data, b"\r\n")))
        else:
            self.conn.write(data if head is None else head + data)
        if self._probe_id is not None and data:
            timing_probe.mark(self._probe_id, "first")
            self._probe_id = None
        return self.conn.write_paused

    def finish(self, data: bytes = b"") -> None:
        """The last piece of the body: the answer is complete."""
        if self.response_complete:
            return
        self.response_complete = True
        # The hang-up callback (a HangUpWatch's bound method, whose watch holds our receive) would make
        # a reference cycle per request that only the cyclic collector frees: drop it, it is no longer due.
        self._on_disconnect = None
        if not self.disconnected:
            head, self._head = self._head, None
            if self._no_body:
                out = head or b""
            elif self._chunked:
                framed = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
                out = b"".join((head or b"", framed, _LAST_CHUNK))
            else:
                out = data if head is None else head + data
            if out:
                self.conn.write(out)
        self._wake()  # a pending receive() now answers http.disconnect
        self.conn.response_done(self)

    def drain(self) -> None:
        """The client's buffer emptied (the connection's resume_writing)."""
        if self.on_drain is not None:
            self.on_drain()

    # -- timing probe -----------------------------------------------------------------------------
    def _probe_start(self, headers: Any) -> None:
        for name, value in headers:
            if name.lower() == b"x-request-id":
                self._probe_id = value.decode("latin-1")
                parsed = self.scope.get("kvfence.parsed")
                if parsed is not None:
                    timing_probe.mark(self._probe_id, "parsed", parsed)
                return
