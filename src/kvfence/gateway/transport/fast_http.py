"""A lean HTTP/1.1 keep-alive client over asyncio for plain-http upstreams (see ``upstream.py``):
one connection and the answer it is reading; the pool is ``fast_pool.py``.

It does only what the gateway's hot path needs: POST a body with the gateway's headers and stream the
answer back, over a pool of kept-alive connections to one ``host:port``. Responses are parsed by
httptools (llhttp, the parser uvicorn uses), which also undoes chunked transfer coding. Errors are
raised as httpx's exception types so callers handle both clients alike::

    httpx.ConnectError / ConnectTimeout   the backend cannot be reached
    httpx.PoolTimeout                     every pooled connection stayed busy for ``pool_timeout_s``
    httpx.ReadTimeout                     no byte for ``read_timeout_s``
    httpx.RemoteProtocolError             the backend closed early or sent something that is not HTTP
    httpx.LocalProtocolError              a header value that would split the request

Not supported, on purpose: TLS, proxies, redirects, HTTP/2, request streaming. Those backends use
httpx.
"""

from __future__ import annotations

import asyncio
import collections
import zlib
from collections.abc import AsyncIterator
from typing import Protocol, cast

import httptools
import httpx

from kvfence.http.tcp import set_nodelay

__all__ = ["BodySink", "Connection", "ConnectionPool", "FastResponse"]

# Pause reading from the backend when this much answer is buffered and not yet taken by the caller:
# a slow client must slow the backend down, not grow the gateway's memory.
_HIGH_WATER = 256 * 1024
_KEEPALIVE_EXPIRY_S = 4.0  # under the 5 s idle timeout of uvicorn-based engines (vLLM, kvfence)
_STATUS_NOT_YET = 0


class BodySink(Protocol):
    """Where :meth:`FastResponse.relay_to` delivers the body, from the event loop's read callback."""

    def body(self, data: bytes) -> None:
        """What one read from the backend brought of the body (transfer coding undone)."""
        ...

    def end(self, error: httpx.HTTPError | None, tail: bytes) -> None:
        """The body is complete (``None``) or broke off (``error``); ``tail`` is its last piece, not
        yet delivered (often the read that ended it: one write can carry both)."""
        ...


class FastResponse:
    """One upstream answer: status and headers are in; the body streams through :meth:`aiter_raw`, or
    is pushed to a :class:`BodySink` (:meth:`relay_to`)."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop, read_timeout_s: float) -> None:
        self._conn = conn
        self._loop = loop
        self._read_timeout_s = read_timeout_s
        # One deadline timer per answer, pushed back as bytes arrive, instead of a timer per wait.
        self._timer: asyncio.TimerHandle | None = None
        self.last_activity = loop.time()
        self.status_code = _STATUS_NOT_YET
        self.headers: dict[str, str] = {}
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._complete = False
        self._error: httpx.HTTPError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._released = False
        self._content: bytes | None = None
        self._sink: BodySink | None = None
        self._sink_paused = False  # the sink asked to stop reading (its client is slow)
        self._batch: list[bytes] = []  # body pieces of the read being parsed, for the sink

    # -- called by the connection (event-loop callbacks) ------------------------------------------
    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: httpx.HTTPError) -> None:
        if self._error is None and not self._complete:
            self._error = error
            sink = self._sink
            if sink is not None:
                self._sink = None
                sink.end(error, self._take_batch())
        self._wake()

    def _body(self, data: bytes) -> bool:
        """A piece of body from the parser: batched for the sink if there is one (True), else buffered."""
        if self._sink is None:
            self._chunks.append(data)
            self._buffered += len(data)
            return False
        self._batch.append(data)
        return True

    def _take_batch(self) -> bytes:
        batch = self._batch
        if not batch:
            return b""
        data = batch[0] if len(batch) == 1 else b"".join(batch)
        batch.clear()
        return data

    def _end_of_read(self) -> None:
        """One read from the backend is parsed: what it brought goes to the sink in one piece."""
        sink = self._sink
        if sink is not None and self._batch:
            sink.body(self._take_batch())

    def _completed(self) -> None:
        self._complete = True
        sink = self._sink
        if sink is not None:
            self._sink = None
            sink.end(None, self._take_batch())
        else:
            self._wake()

    # -- waiting ----------------------------------------------------------------------------------
    async def _wait(self) -> None:
        loop = self._loop
        waiter = self._waiter = loop.create_future()
        self.last_activity = loop.time()  # the timeout counts from the later of this and the last byte
        if self._timer is None:
            self._timer = loop.call_at(self.last_activity + self._read_timeout_s, self._check_deadline)
        try:
            await waiter
        except httpx.ReadTimeout:
            self._release(reusable=False)
            raise
        finally:
            self._waiter = None

    def _check_deadline(self) -> None:
        self._timer = None
        if self._sink is not None:
            self._check_sink_deadline()
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting now: the next wait arms a new deadline
        deadline = self.last_activity + self._read_timeout_s
        if self._loop.time() < deadline:
            self._timer = self._loop.call_at(deadline, self._check_deadline)
        else:
            waiter.set_exception(httpx.ReadTimeout(f"no data from the backend for {self._read_timeout_s:g} s"))

    def _check_sink_deadline(self) -> None:
        now = self._loop.time()
        if self._sink_paused:
            self.last_activity = now  # waiting for our own client is not the backend's silence
        deadline = self.last_activity + self._read_timeout_s
        if now < deadline:
            self._timer = self._loop.call_at(deadline, self._check_deadline)
        else:
            self._fail(httpx.ReadTimeout(f"no data from the backend for {self._read_timeout_s:g} s"))

    async def _wait_headers(self) -> None:
        while self.status_code == _STATUS_NOT_YET:
            if self._error is not None:
                self._release(reusable=False)
                raise self._error
            await self._wait()

    # -- the caller's side ------------------------------------------------------------------------
    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer coding undone, content coding kept)."""
        while True:
            if self._chunks:
                data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
                self._chunks.clear()
                self._buffered = 0
                self._conn.resume()
                yield data
                continue
            if self._complete:
                self._release(reusable=True)
                return
            if self._error is not None:
                self._release(reusable=False)
                raise self._error
            await self._wait()

    def relay_to(self, sink: BodySink) -> None:
        """Push the body to ``sink`` from now on, straight from the connection's read callback: no
        task wake-up and no buffering per piece. What arrived before is delivered first (in one piece);
        ``sink.end`` may be called before this returns. The caller still calls :meth:`aclose`."""
        data = b""
        if self._chunks:
            data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
            self._chunks.clear()
            self._buffered = 0
            self._conn.resume()
        if self._complete or self._error is not None:
            sink.end(self._error if not self._complete else None, data)
            return
        if data:
            sink.body(data)
        self._sink = sink
        self.last_activity = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(self.last_activity + self._read_timeout_s, self._check_deadline)

    def pause_reading(self) -> None:
        """The sink cannot take more now: stop reading from the backend (it is slowed down by TCP)."""
        self._sink_paused = True
        self._conn.pause()

    def resume_reading(self) -> None:
        self._sink_paused = False
        self._conn.resume()

    async def aread(self) -> bytes:
        """The whole body, content coding (gzip, deflate) undone as httpx does."""
        if self._content is None:
            body = b"".join([chunk async for chunk in self.aiter_raw()])
            encoding = self.headers.get("content-encoding", "").strip().lower()
            if encoding in ("gzip", "deflate"):
                try:
                    body = zlib.decompress(body, 47 if encoding == "gzip" else zlib.MAX_WBITS)
                except zlib.error as exc:
                    raise httpx.DecodingError(f"cannot decode {encoding} body: {exc}") from None
            self._content = body
        return self._content

    async def aclose(self) -> None:
        """Done with this answer: an unfinished one closes its connection (it cannot be reused)."""
        self._release(reusable=self._complete)

    def _release(self, *, reusable: bool) -> None:
        if not self._released:
            self._released = True
            self._sink = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._conn.finish(reusable=reusable)


class ConnectionPool(Protocol):
    """What a connection tells its pool (``fast_pool.FastUpstream``)."""

    def _put_back(self, conn: Connection) -> None: ...

    def _forget(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One kept-alive TCP connection; httptools calls the ``on_*`` methods while parsing."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._response: FastResponse | None = None
        self._raw_headers: list[tuple[bytes, bytes]] = []  # decoded once, when the head is complete
        self._until_close = False  # a body without length or chunking ends when the connection does
        self._keep_alive = False
        self._paused = False
        self.closed = False
        self.idle_since = 0.0

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        if self._response is None:
            self.close()  # bytes nobody asked for: the connection cannot be trusted any more
            return
        response = self._response
        response.last_activity = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            response._fail(httpx.RemoteProtocolError(f"malformed HTTP response from the backend: {exc}"))
            self.close()
            return
        response._end_of_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self._response
        if response is not None and not response._complete:
            if response.status_code != _STATUS_NOT_YET and self._until_close:
                response._completed()
            elif response.status_code == _STATUS_NOT_YET:
                response._fail(httpx.RemoteProtocolError("Server disconnected without sending a response."))
            else:
                response._fail(httpx.RemoteProtocolError("peer closed connection without sending complete "
                                                         "message body"))
        self._pool._forget(self)

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        response = self._response
        assert response is not None
        headers: dict[str, str] = {}
        for raw_name, raw_value in self._raw_headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self._raw_headers.clear()
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (e.g. 103): the real one follows on this connection
            return
        self._until_close = "content-length" not in headers and "chunked" not in headers.get(
            "transfer-encoding", "").lower()
        response.headers = headers
        response.status_code = status
        response._wake()

    def on_body(self, body: bytes) -> None:
        response = self._response
        assert response is not None
        if response._body(body):
            return  # relayed as it came
        if response._buffered > _HIGH_WATER:
            self.pause()
        response._wake()

    def on_message_complete(self) -> None:
        response = self._response
        assert response is not None
        if response.status_code == _STATUS_NOT_YET:
            return  # end of an interim (1xx) answer
        self._keep_alive = bool(self._parser.should_keep_alive()) and not self._until_close
        response._completed()

    # -- used by the pool and the response --------------------------------------------------------
    def is_usable(self, now: float) -> bool:
        transport = self._transport
        return (not self.closed and transport is not None and not transport.is_closing()
                and now - self.idle_since < _KEEPALIVE_EXPIRY_S)

    def start(self, request: bytes, read_timeout_s: float) -> FastResponse:
        assert self._transport is not None
        self._response = response = FastResponse(self, self._loop, read_timeout_s)
        self._keep_alive = False
        self._until_close = False
        self._transport.write(request)
        return response

    def pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def finish(self, *, reusable: bool) -> None:
        self._response = None
        if reusable and self._keep_alive and not self.closed:
            self.resume()
            self._pool._put_back(self)
        else:
            self.close()

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()  # connection_lost follows and tells the pool
