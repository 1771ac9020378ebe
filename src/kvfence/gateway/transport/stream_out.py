"""Streamed answers out through ASGI: from an async iterator (:class:`ClosingStream`), or pushed from
the upstream connection's read callback (:class:`RelayStream`, the lean client's pass-through).

Starlette's ``StreamingResponse`` runs every stream in an anyio task group to notice a hang-up, which
costs more CPU than the rest of a streamed answer's pass through the gateway; here the request's
:class:`~kvfence.gateway.transport.hang_up.HangUpWatch` does it. Both end the same ways: done, upstream broke
off (an exception becomes the stream's last event through ``on_error``), client gone (quietly).
``on_close(client_gone)`` runs however the stream ends, even unstarted.

A client that hangs up after the stream's end went out to it (``[DONE]``, a finish_reason) has had
the whole answer: a close-framed upstream ends its body only when it closes its connection, often
after the client (the ``openai`` client closes at ``[DONE]``) has gone. That is a complete answer
(``client_gone`` false, logged 200), not a hang-up.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol

import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from kvfence.gateway.transport.fast_http import FastResponse
from kvfence.gateway.transport.hang_up import HangUpWatch
from kvfence.gateway.transport.stream_end import CUT_SHORT_MESSAGE, StreamTail

__all__ = ["ClosingStream", "DirectOut", "DirectRelay", "OwnedStream", "RelayStream", "SendPump", "checked_stream"]

OnClose = Callable[[bool], Awaitable[None]]
OnError = Callable[[Exception], bytes]


class OwnedStream(Response):
    """A streamed answer that owns the rest of its request: ``on_close`` releases what it holds."""

    def __init__(self, on_close: OnClose, on_error: OnError, watch: HangUpWatch | None, *, status_code: int,
                 media_type: str | None, headers: Mapping[str, str] | None,
                 raw_headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        if raw_headers is not None:
            self.raw_headers = raw_headers  # already encoded, content type included: sent as they are
        else:
            self.init_headers(headers)
        self._on_close = on_close
        self._on_error = on_error
        self._watch = watch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = self._watch if self._watch is not None else HangUpWatch(receive)
        client_gone = False
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            if not await self._body(send, watch):
                watch.stop()
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not watch.absorb():
                raise
            # the hang-up was ours to handle: end this stream, not the server's task
            client_gone = not self._delivered_end()
        finally:
            watch.stop()
            await self._cleanup()
            await self._on_close(client_gone)

    async def _body(self, send: Send, watch: HangUpWatch) -> bool:
        """Send the body; True if its last message (``more_body`` false) went out with it."""
        raise NotImplementedError

    def _delivered_end(self) -> bool:
        """Whether the stream's end markers were sent to the client (see the module docstring)."""
        raise NotImplementedError

    async def _cleanup(self) -> None:
        raise NotImplementedError


class ClosingStream(OwnedStream):
    """A stream whose chunks come from an async iterator (filtered answers, httpx upstreams)."""

    def __init__(self, content: AsyncIterator[bytes], on_close: OnClose, on_error: OnError,
                 watch: HangUpWatch | None = None, *, status_code: int = 200, media_type: str | None = None,
                 headers: Mapping[str, str] | None = None, raw_headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(on_close, on_error, watch, status_code=status_code, media_type=media_type,
                         headers=headers, raw_headers=raw_headers)
        self.body_iterator = content
        self._sent = StreamTail()  # the end of what went out (whole events: gateway-made or checked)

    async def _body(self, send: Send, watch: HangUpWatch) -> bool:
        content = self.body_iterator
        while True:
            try:
                chunk = await content.__anext__()
            except StopAsyncIteration:
                return False
            except Exception as exc:
                await send({"type": "http.response.body", "body": self._on_error(exc), "more_body": True})
                return False
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self._sent.take(chunk)

    def _delivered_end(self) -> bool:
        return self._sent.ended()

    async def _cleanup(self) -> None:
        closer = getattr(self.body_iterator, "aclose", None)
        if closer is not None:
            await closer()


async def _await(awaitable: Awaitable[None]) -> None:
    await awaitable


class SendPump:
    """Runs the ASGI server's ``send`` from event-loop callbacks, as the upstream's bytes arrive.

    An ASGI ``send`` is a coroutine, but servers (uvicorn's, among others) only suspend it when the
    client's socket applies backpressure; the rest of the time it writes and returns without waiting.
    So each piece is sent by stepping that coroutine right in the upstream's read callback: no task
    wake-up, no queue, no generator per piece (the do-nothing relay's path, plus HTTP framing). When a
    send does suspend, the pump stops reading from the upstream, finishes that send when the server
    says so (what an asyncio task would do: resume the coroutine once the future it waits on is done),
    then flushes what came meanwhile in one piece and reads on.
    """

    def __init__(self, send: Send, upstream: FastResponse, before_last: Callable[[], None],
                 framing: StreamTail | None = None) -> None:
        self._send = send
        self._upstream = upstream
        self._before_last = before_last
        self.sent_last = False  # the answer's last message went out with the last piece
        self._loop = asyncio.get_running_loop()
        self._pending: collections.deque[bytes] = collections.deque()
        self._busy: Coroutine[Any, Any, None] | None = None  # a send the server suspended
        self._ended = False
        self._paused = False
        self._end_error: httpx.HTTPError | None = None
        self._framing = framing  # an SSE answer's: whole events out, a cut-short end is an error
        self.done: asyncio.Future[httpx.HTTPError | BaseException | None] = self._loop.create_future()

    # -- BodySink ---------------------------------------------------------------------------------
    def body(self, data: bytes) -> None:
        if self._framing is not None:
            data = self._framing.take(data)
            if not data:
                return  # an unfinished event, held until the read that completes it
        if self._busy is not None or self.done.done():
            self._pending.append(data)
            return
        self._start(data)

    def end(self, error: httpx.HTTPError | None, tail: bytes) -> None:
        if self._framing is not None:
            error, tail = _relay_end(self._framing, error, tail)
        self._ended, self._end_error = True, error
        if self._busy is not None or self.done.done():
            if tail:
                self._pending.append(tail)
            return
        if self._pending and tail:
            self._pending.append(tail)
            tail = b""
        if error is None and not self._pending:
            # the usual ending: the last piece and the end of the answer in one message, one write
            self._before_last()
            self.sent_last = True
            self._start(tail, more_body=False)
        elif tail:
            self._start(tail)
        else:
            self._finish(error)

    # -- driving the send coroutine ---------------------------------------------------------------
    def _start(self, data: bytes, *, more_body: bool = True) -> None:
        sending = self._send({"type": "http.response.body", "body": data, "more_body": more_body})
        if inspect.iscoroutine(sending):
            self._step(sending)
        else:  # some other awaitable: let a task drive it, and wait as for a suspended send
            self._step(_await(sending))

    def _step(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            yielded = coro.send(None)
        except StopIteration:
            self._busy = None
            self._after_send()
            return
        except BaseException as exc:  # the server refused the message: nothing more can be sent
            self._busy = None
            self._finish(exc)
            return
        if not self._paused:
            self._paused = True
            self._upstream.pause_reading()
        self._busy = coro
        if asyncio.isfuture(yielded):
            yielded._asyncio_future_blocking = False
            yielded.add_done_callback(self._resume)
        else:  # a bare yield (asyncio.sleep(0)): run again on the next loop iteration
            self._loop.call_soon(self._resume, None)

    def _resume(self, _: object) -> None:
        coro = self._busy
        if coro is not None and not self.done.done():
            self._step(coro)

    def _after_send(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._start(data)
            return
        if self._ended:
            self._finish(self._end_error)  # (after a last message too: then nothing is pending)
        elif self._paused:
            self._paused = False
            self._upstream.resume_reading()

    def _finish(self, result: httpx.HTTPError | BaseException | None) -> None:
        if not self.done.done():
            self.done.set_result(result)

    def delivered_end(self) -> bool:
        """Whether the stream's end markers went out: taken, and neither pending nor in a suspended send."""
        return (self._framing is not None and self._busy is None and not self._pending
                and self._framing.ended())

    def close(self) -> None:
        """Abandon a send the server suspended (the stream is being torn down)."""
        coro, self._busy = self._busy, None
        if coro is not None:
            coro.close()
        self._pending.clear()


def _relay_end(seen: StreamTail, error: httpx.HTTPError | None, tail: bytes) -> tuple[httpx.HTTPError | None, bytes]:
    """How a relayed stream ends: (its error, the last bytes to send). The error is the upstream's, or,
    when the framing said "complete" but the stream's own end markers are missing (a close-framed body
    cut short), one saying so; an unfinished last event is never sent."""
    rest, complete = seen.end(tail)
    if error is None and not complete:
        error = httpx.RemoteProtocolError(CUT_SHORT_MESSAGE)
    return error, rest


async def checked_stream(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks`` in whole events, then an error if they did not end the stream (``stream_end``): the
    lean relays' check, for streams relayed from httpx."""
    seen = StreamTail()
    try:
        async for chunk in chunks:
            whole = seen.take(chunk)
            if whole:
                yield whole
    finally:
        closer = getattr(chunks, "aclose", None)
        if closer is not None:
            await closer()
    rest, complete = seen.end(b"")
    if rest:
        yield rest
    if not complete:
        raise httpx.RemoteProtocolError(CUT_SHORT_MESSAGE)


class DirectOut(Protocol):
    """A server that takes the answer's bytes without ASGI messages (``kvfence.http.cycle.RequestCycle``)."""

    on_drain: Callable[[], None] | None  # called when the client's buffer has room again

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...

    def write(self, data: bytes) -> bool:
        """Send a piece of the body; True when the client's buffer is full."""
        ...

    def finish(self, data: bytes = b"") -> None:
        """Send the last piece: the answer is complete."""
        ...


class DirectRelay:
    """The upstream's body straight to a :class:`DirectOut`, from the upstream's read callback: one
    write per read, the upstream paused while the client's buffer is full (slow-client backpressure)."""

    def __init__(self, out: DirectOut, upstream: FastResponse, before_last: Callable[[], None],
                 framing: StreamTail | None = None) -> None:
        self._out = out
        self._upstream = upstream
        self._before_last = before_last
        self._paused = False
        self._framing = framing  # as SendPump's
        self.done: asyncio.Future[httpx.HTTPError | None] = asyncio.get_running_loop().create_future()

    def body(self, data: bytes) -> None:
        if self._framing is not None:
            data = self._framing.take(data)
        if data and self._out.write(data) and not self._paused:
            self._paused = True
            self._upstream.pause_reading()

    def end(self, error: httpx.HTTPError | None, tail: bytes) -> None:
        if self._framing is not None:
            error, tail = _relay_end(self._framing, error, tail)
        if error is None:
            self._before_last()
            self._out.finish(tail)
        elif tail:
            self._out.write(tail)
        if not self.done.done():
            self.done.set_result(error)

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._upstream.resume_reading()

    def delivered_end(self) -> bool:
        """Whether the stream's end markers were written to the client's transport."""
        return self._framing is not None and self._framing.ended()


class RelayStream(OwnedStream):
    """An unprocessed stream from the lean client, relayed by a :class:`SendPump` (no scanners, no
    per-chunk accounting: the answer goes out byte for byte as it came; a stream that ends without its
    end markers gets an error event after it, see ``stream_end``)."""

    def __init__(self, upstream: FastResponse, on_close: OnClose, on_error: OnError,
                 watch: HangUpWatch | None = None, *, status_code: int = 200, media_type: str | None = None,
                 headers: Mapping[str, str] | None = None, raw_headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(on_close, on_error, watch, status_code=status_code, media_type=media_type,
                         headers=headers, raw_headers=raw_headers)
        self._upstream = upstream
        self._pump: SendPump | None = None
        self._relay: DirectRelay | None = None

    async def _body(self, send: Send, watch: HangUpWatch) -> bool:
        # The hang-up watch stops before the last message goes out: once the answer is complete the
        # server reports a "disconnect" to anyone still receiving, and that is no hang-up.
        pump = self._pump = SendPump(send, self._upstream, watch.stop, StreamTail())
        self._upstream.relay_to(pump)
        outcome = await pump.done
        if isinstance(outcome, BaseException) and not isinstance(outcome, httpx.HTTPError):
            raise outcome  # the server's own failure: as a send raising in a task would
        if outcome is not None:
            await send({"type": "http.response.body", "body": self._on_error(outcome), "more_body": True})
        return pump.sent_last

    async def relay_direct(self, out: DirectOut, receive: Receive) -> None:
        """Serve this stream on a server that writes bytes directly (the lean server), not ASGI."""
        watch = self._watch if self._watch is not None else HangUpWatch(receive)
        client_gone = False
        try:
            out.start(self.status_code, self.raw_headers)
            relay = self._relay = DirectRelay(out, self._upstream, watch.stop, StreamTail())
            out.on_drain = relay.resume
            self._upstream.relay_to(relay)
            outcome = await relay.done
            if outcome is not None:
                watch.stop()
                out.finish(self._on_error(outcome))  # the error event ends the answer
        except asyncio.CancelledError:
            if not watch.absorb():
                raise
            client_gone = not self._delivered_end()
        finally:
            out.on_drain = None
            watch.stop()
            await self._on_close(client_gone)

    def _delivered_end(self) -> bool:
        if self._relay is not None:
            return self._relay.delivered_end()
        return self._pump is not None and self._pump.delivered_end()

    async def _cleanup(self) -> None:
        if self._pump is not None:
            self._pump.close()
