"""One HTTP/1.1 connection of the server: requests parsed by httptools (llhttp) and answered one at a
time, in the order they came (pipelined requests wait their turn; reading pauses meanwhile).

What it refuses before any app sees the request, each with an OpenAI-shaped JSON error and a close
(the limits are the server's :class:`~kvfence.http.server.HttpConfig`):

- 400 for bytes that are not HTTP/1.x (bad request line, bad chunked coding, ``Content-Length`` with
  ``Transfer-Encoding``, a path that is not ASCII);
- 400 for a field that must appear once appearing twice (``Host``, ``Content-Type``), and for two
  credentials (``Authorization``, ``x-api-key``, ``api-key``) that disagree or repeat: servers and
  proxies pick different ones (the first, the last), so a request must not be read two ways;
- 431 for a request head over ``max_head_bytes`` or with more than ``max_headers`` fields;
- 413 for a body over ``max_body_bytes`` (a ``Content-Length`` over it is refused before its first byte);
- 408 for a head not complete ``head_timeout_s`` after its first byte, or a body not complete
  ``body_timeout_s`` after its head (the clock stops while the server itself has paused reading).

A connection with no request in progress (new, or kept alive after an answer) is closed after
``idle_timeout_s`` without a byte.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

import httptools

from kvfence.http import timing_probe
from kvfence.http.cycle import RequestCycle, error_answer
from kvfence.http.tcp import set_nodelay

if TYPE_CHECKING:
    from kvfence.http.server import HttpServer

__all__ = ["HttpConnection"]

log = logging.getLogger("kvfence.gateway")

# Stop reading a request body the app has not taken yet above this many bytes (a client cannot grow
# the gateway's memory faster than the app reads; the app's own limit answers 413).
_BODY_HIGH_WATER = 64 * 1024
# Fields a request may carry once (RFC 9110 makes a repeated Host a 400).
_ONCE = frozenset({b"host", b"content-type", b"proxy-authorization"})
# Where a client may put its API key (OpenAI: Authorization; Anthropic: x-api-key; Azure: api-key).
_CREDENTIALS = frozenset({b"authorization", b"x-api-key", b"api-key"})


class _Refused(Exception):
    """Raised in a parser callback to stop parsing: the request is refused (``HttpConnection._refusal``)."""


class HttpConnection(asyncio.Protocol):
    """One client connection of a :class:`~kvfence.http.server.HttpServer`."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self._limits = server.config
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self.client: tuple[str, int] | None = None
        self._local: tuple[str, int] | None = None
        self.closing = False  # the server is shutting down: close once the current answer is out
        self.write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._cycle: RequestCycle | None = None  # the request being answered
        self._parsing: RequestCycle | None = None  # the request whose body is being parsed
        self._pipeline: collections.deque[RequestCycle] = collections.deque()
        self._reading_paused = False
        self._stopped_parsing = False
        self._pending_refusal: bytes | None = None  # written once the requests before it are answered
        self._refusal: tuple[int, str, str] | None = None
        self._timer: asyncio.TimerHandle | None = None  # the idle, head or body deadline now running
        self._body_bytes = 0  # of the request being parsed
        self._in_head = False
        self._head_bytes = 0  # bytes read while a request head is incomplete
        self._field_bytes = 0
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect_continue = False
        self._parsed_at = 0.0
        self._once_seen: set[bytes] = set()
        self._credential: tuple[bytes, bytes] | None = None  # the request's first credential field

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        set_nodelay(transport)  # every streamed event leaves when written (tcp.py: not every loop does this)
        self.client = _address(transport.get_extra_info("peername"))
        self._local = _address(transport.get_extra_info("sockname"))
        self.server.connections.add(self)
        self._arm(self._limits.idle_timeout_s, self._idle_expired)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._cancel_timer()
        self._stopped_parsing = True
        for cycle in (self._cycle, self._parsing, *self._pipeline):
            if cycle is not None:
                cycle.lost()
        self._pipeline.clear()
        self._wake_drain_waiters()

    def data_received(self, data: bytes) -> None:
        if self._stopped_parsing:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # No protocol switch is served: the request that asked for one is answered as plain HTTP/1.1,
            # then the connection closes (the parser cannot go on past an upgrade).
            self._stopped_parsing = True
            if self._parsing is not None:
                self._parsing.keep_alive = False
                self._parsing.end_body()
            return
        except httptools.HttpParserError as exc:
            if self._stopped_parsing and self._refusal is None:
                return  # bytes after a `Connection: close` request: ignored
            status, message, code = self._refusal or (400, f"malformed HTTP request: {_reason(exc)}", "bad_request")
            self._refuse(status, message, code)
            return
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_head_bytes:
                self._refuse(431, f"request head over {self._limits.max_head_bytes} bytes",
                             "request_header_fields_too_large")

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_drain_waiters()
        if self._cycle is not None:
            self._cycle.drain()

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._stopped_parsing:
            raise _Refused  # a request after one that closes the connection: not read
        self._url = b""
        self._headers = []
        self._expect_continue = False
        self._once_seen.clear()
        self._credential = None
        self._in_head = True
        self._field_bytes = 0
        self._body_bytes = 0
        self._arm(self._limits.head_timeout_s, self._head_expired)
        if timing_probe.enabled():
            self._parsed_at = time.perf_counter()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_field(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        elif name in _CREDENTIALS:
            first = self._credential
            if first is None:
                self._credential = (name, _credential_token(name, value))
            elif first[0] == name or first[1] != _credential_token(name, value):
                self._refusal = (400, f"the request carries more than one credential ({first[0].decode()} and "
                                      f"{name.decode()}): send one", "ambiguous_credentials")
                raise _Refused
        elif name in _ONCE:
            if name in self._once_seen:
                self._refusal = (400, f"the {name.decode()} header field appears more than once", "bad_request")
                raise _Refused
            self._once_seen.add(name)
        headers = self._headers
        headers.append((name, value))
        # _count_field inlined: this runs for every header of every request
        self._field_bytes += len(name) + len(value) + 4
        if self._field_bytes > self._limits.max_head_bytes:
            self._count_field(0)  # raises, with the refusal set
        if len(headers) > self._limits.max_headers:
            self._refusal = (431, f"more than {self._limits.max_headers} request header fields",
                             "request_header_fields_too_large")
            raise _Refused

    def _count_field(self, size: int) -> None:
        self._field_bytes += size
        if self._field_bytes > self._limits.max_head_bytes:
            self._refusal = (431, f"request head over {self._limits.max_head_bytes} bytes",
                             "request_header_fields_too_large")
            raise _Refused

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._cancel_timer()
        parser = self._parser
        raw_path, query = self._url, b""
        if self._url != b"*":  # OPTIONS * names the server, not a path
            try:
                parsed = httptools.parse_url(self._url)
            except httptools.HttpParserInvalidURLError:
                self._refusal = (400, "malformed request target", "bad_request")
                raise _Refused from None
            raw_path, query = parsed.path or b"/", parsed.query or b""
        try:
            path = raw_path.decode("ascii")
            if "%" in path:
                path = unquote(path)
        except UnicodeDecodeError:
            self._refusal = (400, "the request path is not ASCII (percent-encode it)", "bad_request")
            raise _Refused from None
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": parser.get_http_version(), "server": self._local, "client": self.client,
            "scheme": "http", "method": parser.get_method().decode("ascii"), "root_path": "", "path": path,
            "raw_path": raw_path, "query_string": query, "headers": self._headers,
            "state": dict(self.server.state),
        }
        if self._parsed_at:
            scope["kvfence.parsed"] = self._parsed_at
        length = _content_length(self._headers)
        if length is not None and length > self._limits.max_body_bytes:
            self._refusal = (413, f"request body over {self._limits.max_body_bytes} bytes", "request_too_large")
            raise _Refused
        keep_alive = bool(parser.should_keep_alive()) and not self.closing
        cycle = RequestCycle(self, scope, keep_alive=keep_alive, expect_continue=self._expect_continue)
        self._parsing = cycle
        self._arm(self._limits.body_timeout_s, self._body_expired)  # cancelled when the body is complete
        if self._cycle is None:
            self._start(cycle)
        else:
            self._pipeline.append(cycle)
            self._update_reading()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._limits.max_body_bytes:
            self._refusal = (413, f"request body over {self._limits.max_body_bytes} bytes", "request_too_large")
            raise _Refused
        cycle = self._parsing
        if cycle is not None:
            cycle.feed_body(body)
            if cycle.body_size > _BODY_HIGH_WATER:
                self._update_reading()

    def on_message_complete(self) -> None:
        self._cancel_timer()
        cycle = self._parsing
        if cycle is not None:
            cycle.end_body()
            if not cycle.keep_alive:
                self._stopped_parsing = True

    # -- running requests -------------------------------------------------------------------------
    def _start(self, cycle: RequestCycle) -> None:
        self._cycle = cycle
        task = self._loop.create_task(self._run(cycle))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    async def _run(self, cycle: RequestCycle) -> None:
        try:
            await self.server.handle(cycle)
        except asyncio.CancelledError:
            if not cycle.response_complete:
                self.abort()
            raise
        except Exception:
            log.exception("lean server: %s %s failed", cycle.scope["method"], cycle.scope["path"])
            self._unanswered(cycle, "internal gateway error")
            return
        if not cycle.response_complete:
            self._unanswered(cycle, "the application returned without a complete answer")

    def _unanswered(self, cycle: RequestCycle, message: str) -> None:
        if cycle.response_started or cycle.disconnected:
            self.abort()  # half an answer: closing is the only honest ending
            return
        cycle.response_complete = True
        self.write(error_answer(500, message, "internal_error", date=self.server.date_header()))
        self.abort()

    def response_done(self, cycle: RequestCycle) -> None:
        """``cycle``'s answer is complete: close, or answer the next request."""
        if self._cycle is not cycle:
            return
        self._cycle = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._pending_refusal is not None and not (self._pipeline and cycle.keep_alive):
            transport.write(self._pending_refusal)
            transport.close()
            return
        if not cycle.keep_alive:
            transport.close()  # after what is buffered: the answer still goes out
            return
        if self._pipeline:
            self._start(self._pipeline.popleft())
            self._update_reading()
            return
        if self.closing:
            transport.close()
            return
        if self._timer is None:  # no next request begun (its head or body deadline runs otherwise)
            self._arm(self._limits.idle_timeout_s, self._idle_expired)
        self._update_reading()

    def body_taken(self, cycle: RequestCycle) -> None:
        """The app took (or waits for) body bytes: read on if reading was paused for them."""
        if cycle is self._parsing:
            self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        parsing = self._parsing
        pause = (bool(self._pipeline) or self._pending_refusal is not None
                 or (parsing is not None and parsing.body_size > _BODY_HIGH_WATER))
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _refuse(self, status: int, message: str, code: str) -> None:
        # one line, no traceback: a client's mistake (or attack), not the server's fault
        log.info("refused a request from %s: %d %s (%s)", _peer(self.client), status, code, message)
        self._stopped_parsing = True
        answer = error_answer(status, message, code, date=self.server.date_header())
        parsing = self._parsing
        cut = parsing is not None and not parsing.body_complete
        if cut and parsing is not None:
            if parsing in self._pipeline:
                self._pipeline.remove(parsing)
            else:
                parsing.lost()  # its body broke off: the app sees a hang-up, the client this refusal
        current = self._cycle
        if current is None or current.response_complete or (cut and current is parsing and not current.response_started):
            # nothing is being answered, or the refused request itself (its app now sees a hang-up,
            # whatever it sends after is not written): the refusal goes out now
            self.write(answer)
            self.abort()
        else:
            self._pending_refusal = answer
            self._update_reading()

    # -- writing ----------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    async def drained(self) -> None:
        """Wait until the client's buffer drains (or the connection is gone)."""
        if not self.write_paused or self._transport is None or self._transport.is_closing():
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def date_header(self) -> bytes:
        return self.server.date_header()

    # -- lifecycle --------------------------------------------------------------------------------
    def _arm(self, seconds: float, expired: Callable[[], None]) -> None:
        self._cancel_timer()
        self._timer = self._loop.call_later(seconds, expired)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _idle_expired(self) -> None:
        self._timer = None
        if self._cycle is None and not self._pipeline:
            transport = self._transport
            self.abort(force=transport is not None and transport.get_write_buffer_size() > 0)

    def _head_expired(self) -> None:
        self._timer = None
        if not self._in_head or self._stopped_parsing:
            return
        if self._reading_paused:  # the server stopped reading (pipelined requests wait): not the client's delay
            self._arm(self._limits.head_timeout_s, self._head_expired)
            return
        self._refuse(408, f"request head not complete within {self._limits.head_timeout_s:g} s", "request_timeout")

    def _body_expired(self) -> None:
        self._timer = None
        parsing = self._parsing
        if parsing is None or parsing.body_complete or self._stopped_parsing:
            return
        if self._reading_paused:  # the app has not taken what came yet: not the client's delay
            self._arm(self._limits.body_timeout_s, self._body_expired)
            return
        self._refuse(408, f"request body not complete within {self._limits.body_timeout_s:g} s", "request_timeout")

    def shutdown(self) -> None:
        """The server stops: close now if idle, else after the answer in progress."""
        self.closing = True
        self._pipeline.clear()  # not started: the client retries them on a new connection
        if self._cycle is None:
            self.abort()
        else:
            self._cycle.keep_alive = False

    def abort(self, *, force: bool = False) -> None:
        """Close the connection: what was written still goes out, unless ``force`` (a client that
        reads nothing would otherwise hold the connection open for ever)."""
        self._stopped_parsing = True
        transport = self._transport
        if transport is None:
            return
        if force:
            transport.abort()
        elif not transport.is_closing():
            transport.close()


def _credential_token(name: bytes, value: bytes) -> bytes:
    """The key a credential field carries (``Authorization: Bearer K`` and ``x-api-key: K`` agree)."""
    value = value.strip()
    if name == b"authorization" and value[:7].lower() == b"bearer ":
        return value[7:].strip()
    return value


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client is not None else "-"


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # llhttp refuses it
    return None


def _address(info: object) -> tuple[str, int] | None:
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
