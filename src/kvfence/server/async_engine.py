"""Drive the synchronous engine from asyncio: one background thread runs ``LLMEngine.step()``.

The engine is not thread-safe, so exactly one thread touches it. HTTP handlers talk to that
thread through an inbox of commands (add, abort) and receive outputs on a per-request
``asyncio.Queue``. A request the engine aborted alone after a failed forward pass (fault
isolation) gets an internal error; the others keep running. A request is *admitted* only once the engine thread has called
``add_request`` for it, so an admission error (I3: prompt plus ``max_tokens`` cannot fit) reaches
the handler before any response byte is sent, and nothing was allocated for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from kvfence.engine.interface import Engine, EngineRequest, EngineStats, RequestOutput, SamplingParams
from kvfence.errors import RequestError

__all__ = ["AsyncEngine", "EngineFault", "EngineProtocol", "QueueFullError", "RequestGroup"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# How often the engine thread refreshes its stats snapshot while busy (idle: after every change).
_STATS_INTERVAL_S = 0.05


EngineProtocol = Engine  # the typed seam: kvfence.engine.interface


class QueueFullError(Exception):
    """The bounded request queue is full (HTTP 429)."""


class EngineFault(Exception):
    """The engine failed internally while serving a request; the request was aborted."""


@dataclass(eq=False)
class RequestStream:
    """The engine-thread side of one request: where its outputs go and its admission future."""

    request_id: str
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[RequestOutput | BaseException]
    admitted: asyncio.Future[None]
    owner: str = ""  # the organisation whose slot this is (its share of the queue)


class RequestGroup:
    """The requests of one HTTP call (one per prompt), with outputs on one shared queue."""

    def __init__(self, engine: AsyncEngine, request_ids: list[str],
                 queue: asyncio.Queue[RequestOutput | BaseException]) -> None:
        self._engine = engine
        self.request_ids = request_ids
        self._queue = queue
        self._unfinished = set(request_ids)

    @property
    def is_finished(self) -> bool:
        return not self._unfinished

    async def __aiter__(self) -> AsyncIterator[RequestOutput]:
        """Yield ``RequestOutput`` objects until every request finished; raise what the engine reported."""
        while self._unfinished:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                # One request failed (e.g. fault isolation aborted it): the call fails, so its other
                # requests (choices, prompts) must not run on unread.
                self.abort()
                raise item
            if item.request_id not in self._unfinished:
                continue
            if item.finished:
                self._unfinished.discard(item.request_id)
            yield item

    def abort(self) -> None:
        """Abort every request not finished yet (idempotent): their pages are released and scrubbed."""
        for request_id in list(self._unfinished):
            self._engine.abort(request_id)
        self._unfinished.clear()


@dataclass
class _Add:
    stream: RequestStream
    prompt_token_ids: list[int]
    params: SamplingParams
    scope_key: bytes


@dataclass
class _Abort:
    request_id: str


class AsyncEngine:
    """Owns the engine thread; ``submit`` admits a request, ``abort`` releases it (and its pages)."""

    def __init__(self, engine: Engine, *, max_pending: int | None = None) -> None:
        self.engine = engine
        self.max_pending = max_pending
        self._cond = threading.Condition()
        self._inbox: list[_Add | _Abort] = []
        self._streams: dict[str, RequestStream] = {}  # touched only under self._cond
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._stats: EngineStats = engine.stats()
        self._stats_at = time.monotonic()
        self.fault: BaseException | None = None  # set when the engine thread died

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kvfence-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- event-loop side -------------------------------------------------------------------------

    @property
    def num_pending(self) -> int:
        """Requests submitted and not yet finished or aborted."""
        with self._cond:
            return len(self._streams)

    def stats(self) -> EngineStats:
        """The latest ``EngineStats`` snapshot taken by the engine thread."""
        return self._stats

    async def submit(self, requests: list[EngineRequest], scope_key: bytes, *,
                     owner: str = "", owner_limit: int | None = None) -> RequestGroup:
        """Queue the engine requests of one call and wait until the engine admitted all.

        ``owner`` (an organisation) may hold at most ``owner_limit`` of the request slots, so one
        tenant cannot take all of them from the others; a call that alone exceeds it still runs
        when the owner holds nothing else.
        Raises :class:`QueueFullError` when the bounded queue, or the owner's share of it, is full, and the engine's
        :class:`RequestError` (e.g. context length, I3) when it refused one of them; in both cases
        nothing of this call stays in the engine.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        streams = [RequestStream(r.request_id, loop, queue, loop.create_future(), owner) for r in requests]
        with self._cond:
            if self.max_pending is not None and len(self._streams) + len(requests) > self.max_pending:
                raise QueueFullError(f"the request queue is full ({len(self._streams)} requests in flight)")
            if owner_limit is not None:
                held = sum(1 for s in self._streams.values() if s.owner == owner)
                if held and held + len(requests) > owner_limit:
                    raise QueueFullError(f"your organization holds {held} of the server's request slots, "
                                         f"its share ({owner_limit}) while other organizations may need them")
            ids = [s.request_id for s in streams]
            if len(set(ids)) != len(ids) or any(rid in self._streams for rid in ids):
                raise RequestError("duplicate request id")
            for stream, request in zip(streams, requests, strict=True):
                self._streams[stream.request_id] = stream
                self._inbox.append(_Add(stream, request.prompt_token_ids, request.params, scope_key))
            self._cond.notify_all()
        group = RequestGroup(self, ids, queue)
        try:
            await asyncio.gather(*(s.admitted for s in streams))
        except BaseException:
            # Refused, or cancelled while waiting (client left): nothing may stay behind.
            group.abort()
            raise
        return group

    def abort(self, request_id: str) -> None:
        """Abort a request (idempotent, never blocks): the engine releases and scrubs its pages."""
        with self._cond:
            if self._streams.pop(request_id, None) is None:
                return
            self._inbox.append(_Abort(request_id))
            self._cond.notify_all()

    # -- engine thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the engine thread must never die silently
            log.exception("the engine thread failed; the server stops serving generation requests")
            self.fault = exc
            self._fail_all(EngineFault("the engine has failed"))
            return
        self._fail_all(EngineFault("the server is shutting down"))

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._inbox and not self._engine_busy():
                    self._refresh_stats(force=True)
                    self._cond.wait(timeout=1.0)
                if self._stopping:
                    return
                commands, self._inbox = self._inbox, []
            for command in commands:
                self._apply(command)
            if not self._engine_busy():
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # an internal fault: never answered as success
                # The engine isolates a request that fails on its own (take_failed_requests); a step
                # that still raises means nothing runs, so every in-flight request ends now.
                log.exception("engine step failed; aborting every in-flight request")
                self._fail_all(exc)
                if self._engine_busy():
                    raise EngineFault("the engine still holds requests after aborting all of them") from exc
                continue
            self._fail_isolated()
            self._deliver(outputs)
            self._refresh_stats(force=False)

    def _engine_busy(self) -> bool:
        return bool(self.engine.has_unfinished_requests())

    def _apply(self, command: _Add | _Abort) -> None:
        if isinstance(command, _Abort):
            try:
                self.engine.abort_request(command.request_id)
            except Exception:
                log.exception("abort of %s failed", command.request_id)
            return
        stream = command.stream
        with self._cond:
            still_wanted = self._streams.get(stream.request_id) is stream
        if not still_wanted:
            return  # aborted before admission: nothing to allocate
        error: BaseException | None = None
        try:
            self.engine.add_request(stream.request_id, command.prompt_token_ids, command.params, command.scope_key)
        except RequestError as exc:
            error = exc
        except Exception as exc:
            log.exception("add_request(%s) failed", stream.request_id)
            error = EngineFault(f"the engine could not admit the request: {type(exc).__name__}")
        if error is not None:
            with self._cond:
                self._streams.pop(stream.request_id, None)
        self._post(stream, _resolve_admission, error)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        batches: dict[int, tuple[RequestStream, list[RequestOutput | BaseException]]] = {}
        with self._cond:
            for out in outputs:
                stream = self._streams.get(out.request_id)
                if stream is None:
                    continue  # aborted meanwhile
                if out.finished:
                    del self._streams[out.request_id]
                batches.setdefault(id(stream), (stream, []))[1].append(out)
        for stream, items in batches.values():
            self._post(stream, _put_many, items)

    def _fail_isolated(self) -> None:
        """Answer the requests the engine aborted alone after a failed forward pass (fault isolation):
        an internal error for each, while every other request keeps running."""
        for request_id, exc in self.engine.take_failed_requests():
            with self._cond:
                stream = self._streams.pop(request_id, None)
            if stream is None:
                continue  # aborted by its client meanwhile
            fault = EngineFault(f"internal engine error: {type(exc).__name__}")
            self._post(stream, _resolve_admission, fault)
            self._post(stream, _put_many, _items(fault))

    def _fail_all(self, exc: BaseException) -> None:
        with self._cond:
            streams = list(self._streams.values())
            self._streams.clear()
        fault = exc if isinstance(exc, EngineFault) else EngineFault(f"internal engine error: {type(exc).__name__}")
        for stream in streams:
            try:
                self.engine.abort_request(stream.request_id)
            except Exception:
                log.exception("abort of %s after a fault failed", stream.request_id)
            self._post(stream, _resolve_admission, fault)
            self._post(stream, _put_many, _items(fault))

    def _refresh_stats(self, *, force: bool) -> None:
        now = time.monotonic()
        if force or now - self._stats_at >= _STATS_INTERVAL_S:
            try:
                self._stats = self.engine.stats()
            except Exception:
                log.exception("engine stats failed")
            self._stats_at = now

    @staticmethod
    def _post(stream: RequestStream, fn: Callable[[RequestStream, _T], None], arg: _T) -> None:
        # RuntimeError: the event loop is closed, nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            stream.loop.call_soon_threadsafe(fn, stream, arg)


def _resolve_admission(stream: RequestStream, error: BaseException | None) -> None:
    fut = stream.admitted
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


def _items(fault: BaseException) -> list[RequestOutput | BaseException]:
    return [fault]


def _put_many(stream: RequestStream, items: list[RequestOutput | BaseException]) -> None:
    for item in items:
        stream.queue.put_nowait(item)
