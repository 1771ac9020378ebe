"""The lean client's connection pool to one plain-http backend (connections: ``fast_http.py``).

Idle connections are reused most recently used first and dropped once idle for
4 s (under the 5 s idle timeout of uvicorn-based engines), and one found closed is dropped before
anything is written to it. A request written on a connection the backend closes at that moment
fails with ``httpx.RemoteProtocolError``: whether the backend read it cannot be known, so it is not
resent (``upstream.NOT_SENT_ERRORS``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

from kvfence.gateway.transport.fast_http import Connection, FastResponse

__all__ = ["FastUpstream"]

_FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# What would end a header line early or start another one (request splitting).
_UNSAFE_NAME = re.compile(r"[\r\n\0:]")
_UNSAFE_VALUE = re.compile(r"[\r\n\0]")
_PER_REQUEST_HEADERS = frozenset({"x-request-id"})  # a new value each time: not worth remembering
_MAX_MEMO_LINES = 1024


def _header_line(name: str, value: str) -> bytes:
    """``name: value\\r\\n`` checked and encoded; empty for a framing header (this client's business)."""
    if name.lower() in _FRAMING_HEADERS:
        return b""
    if _UNSAFE_NAME.search(name) or _UNSAFE_VALUE.search(value):
        raise httpx.LocalProtocolError(f"invalid character in request header {name!r}")
    try:
        return b"".join((name.encode("ascii"), b": ", value.encode("latin-1"), b"\r\n"))
    except UnicodeEncodeError:
        raise httpx.LocalProtocolError(f"request header {name!r} is not latin-1 text") from None


class FastUpstream:
    """A connection pool to one plain-http backend; ``post`` is the only request it makes."""

    kind = "fast"

    def __init__(self, base_url: str, *, connect_timeout_s: float = 5.0, read_timeout_s: float = 300.0,
                 max_connections: int = 1000, pool_timeout_s: float = 10.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"FastUpstream speaks plain http only, not {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        host_header = self._host if ":" not in self._host else f"[{self._host}]"
        if parts.port is not None:
            host_header += f":{parts.port}"
        self._host_header = host_header.encode("ascii")
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._pool_timeout_s = pool_timeout_s
        self._max_connections = max_connections
        self._idle: collections.deque[Connection] = collections.deque()
        self._all: set[Connection] = set()
        self._opening = 0
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False
        # Encoded, checked header lines by (name, value): a backend's headers are the same for every
        # request of a tenant and class (plans.py), so each is checked and encoded once. Bounded: a
        # per-request value (the request id) is never kept, and the memo is emptied when full.
        self._lines: dict[tuple[str, str], bytes] = {}

    @property
    def num_connections(self) -> int:
        """Open connections (idle or busy), for tests and metrics."""
        return len(self._all)

    async def post(self, path: str, content: bytes, headers: Mapping[str, str]) -> FastResponse:
        request = self._request_bytes(path, content, headers)
        conn = await self._acquire()
        response = conn.start(request, self._read_timeout_s)
        try:
            await response._wait_headers()
        except asyncio.CancelledError:
            # The caller gave up (its client hung up): closing the connection is how the backend learns
            # the request is abandoned, and a half-answered connection can never be reused anyway.
            response._release(reusable=False)
            raise
        return response

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._all):
            conn.close()
        self._idle.clear()
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_exception(httpx.ConnectError("the gateway is shutting down"))

    # -- request bytes ----------------------------------------------------------------------------
    def _request_bytes(self, path: str, content: bytes, headers: Mapping[str, str]) -> bytes:
        lines = [b"POST ", (self._prefix + path).encode("ascii"), b" HTTP/1.1\r\nhost: ", self._host_header,
                 b"\r\ncontent-length: ", str(len(content)).encode("ascii"), b"\r\n"]
        memo = self._lines
        for item in headers.items():
            line = memo.get(item)
            if line is None:
                line = _header_line(*item)
                if item[0] not in _PER_REQUEST_HEADERS:
                    if len(memo) >= _MAX_MEMO_LINES:
                        memo.clear()
                    memo[item] = line
            lines.append(line)
        lines += (b"\r\n", content)
        return b"".join(lines)

    # -- the pool ---------------------------------------------------------------------------------
    async def _acquire(self) -> Connection:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise httpx.ConnectError("the gateway is shutting down")
            now = loop.time()
            while self._idle:
                conn = self._idle.pop()  # most recently used first: least likely to have expired
                if conn.is_usable(now):
                    return conn
                conn.close()
            if len(self._all) + self._opening < self._max_connections:
                return await self._connect(loop)
            waiter = loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, self._pool_timeout_s)
            except TimeoutError:
                raise httpx.PoolTimeout(f"all {self._max_connections} connections to {self._host}:{self._port} "
                                        f"stayed busy for {self._pool_timeout_s:g} s") from None
            finally:
                if not waiter.done():
                    waiter.cancel()

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> Connection:
        self._opening += 1
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: Connection(self), self._host, self._port),
                self._connect_timeout_s)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {self._host}:{self._port} took over "
                                       f"{self._connect_timeout_s:g} s") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        finally:
            self._opening -= 1
        if conn.closed:
            raise httpx.ConnectError(f"{self._host}:{self._port} closed the connection as soon as it opened")
        self._all.add(conn)
        return conn

    def _put_back(self, conn: Connection) -> None:
        if self._closed:
            conn.close()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        self._idle.append(conn)
        self._wake_one()

    def _forget(self, conn: Connection) -> None:
        self._all.discard(conn)
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

