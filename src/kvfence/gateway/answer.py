"""The answer path: whole or streamed upstream answers back to the caller, through the hooks' filters.

Every way a stream can end (done, leak suspected, upstream broke off, client hung up) releases the
request's limits, closes the upstream response and writes the audit row exactly once. A stream that
must stop ends with an OpenAI-shaped error event, never with a silent truncation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

import httpx
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from kvfence.gateway.answer_filter import AnswerFilter, FilterChain, SSEDecoder, encode_event, event_data
from kvfence.gateway.errors import GatewayError, LeakSuspected, UpstreamUnavailable
from kvfence.gateway.hooks import RequestContext
from kvfence.gateway.limits import LimitLease
from kvfence.gateway.runtime import GatewayRuntime
from kvfence.gateway.trace import RequestTrace
from kvfence.gateway.upstream import UpstreamResponse

__all__ = ["OVERHEAD_HEADER", "ClosingStream", "json_error", "stream_response", "whole_response"]

log = logging.getLogger("kvfence.gateway")

OVERHEAD_HEADER = "X-Kvfence-Overhead-Ms"
# Upstream headers a caller may act on; everything else from upstream stays behind the gateway.
_PASSED_HEADERS = frozenset({"retry-after", "openai-processing-ms"})


class _UnreadableStream(Exception):
    """An upstream stream event that is not JSON: it cannot be filtered, so it is never passed on."""


def json_error(error: GatewayError, extra_headers: dict[str, str] | None = None) -> JSONResponse:
    """An OpenAI-shaped error answer for ``error``."""
    return JSONResponse(error.to_body(), status_code=error.status_code,
                        headers={**error.headers(), **(extra_headers or {})})


class ClosingStream(Response):
    """A streamed answer sent straight through ASGI; ``on_close`` runs however it ends (even unstarted).

    Starlette's ``StreamingResponse`` runs every stream in an anyio task group to notice a hang-up,
    which costs more CPU than the rest of a streamed answer's pass through the gateway. Here one
    small asyncio task waits on ``receive``: when the client disconnects it cancels the stream
    (whatever upstream read it is waiting on included), and the stream ends quietly. An exception
    from ``content`` becomes the stream's last event through ``on_error``; the chunks go out with no
    wrapper in between (one less generator per chunk).
    """

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]],
                 on_error: Callable[[Exception], bytes], *, status_code: int = 200,
                 media_type: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        self.body_iterator = content
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)
        self._on_close = on_close
        self._on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        state = {"client_gone": False, "finishing": False}

        async def watch_for_hang_up() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not state["finishing"] and task is not None:
                state["client_gone"] = True
                task.cancel()

        watcher = asyncio.create_task(watch_for_hang_up())
        content = self.body_iterator
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            while True:
                try:
                    chunk = await content.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    await send({"type": "http.response.body", "body": self._on_error(exc), "more_body": True})
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            state["finishing"] = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not state["client_gone"] or task is None:
                raise
            task.uncancel()  # the hang-up was ours to handle: end this stream, not the server's task
        finally:
            state["finishing"] = True
            watcher.cancel()
            closer = getattr(content, "aclose", None)
            if closer is not None:
                await closer()
            await self._on_close()


def _response_headers(trace: RequestTrace, overhead_s: float) -> dict[str, str]:
    headers = {
        "X-Request-Id": trace.request_id,
        OVERHEAD_HEADER: f"{overhead_s * 1000:.3f}",
        "X-Kvfence-Data-Class": trace.data_class,
        "X-Kvfence-Backend": trace.backend or "",
    }
    if trace.cap is not None:
        headers["X-Kvfence-Prompt-Tokens"] = str(trace.cap.prompt_tokens)
        headers["X-Kvfence-Tokens-Trimmed"] = str(trace.cap.tokens_cut)
    return headers


def _answer_filter(runtime: GatewayRuntime, ctx: RequestContext) -> AnswerFilter | None:
    if not runtime.hooks:
        return None
    hooks = list(reversed(runtime.hooks))  # onion order, see hooks.py
    return AnswerFilter(ctx.endpoint, lambda: FilterChain([h.response_filter(ctx) for h in hooks]))


async def whole_response(runtime: GatewayRuntime, ctx: RequestContext, upstream: UpstreamResponse,
                         trace: RequestTrace) -> Response:
    """Read a non-streamed answer (or an upstream error), filter it, log it, answer it."""
    try:
        raw = await upstream.aread()
    except httpx.HTTPError as exc:
        raise UpstreamUnavailable(f"backend {trace.backend} broke off its answer: {type(exc).__name__}") from exc
    finally:
        await upstream.aclose()
    after_upstream = time.perf_counter()
    status = upstream.status_code
    content_type = upstream.headers.get("content-type", "application/json")
    filters = _answer_filter(runtime, ctx)
    if status == 200 and filters is not None:
        try:
            answer = json.loads(raw)
        except ValueError:
            raise UpstreamUnavailable(f"backend {trace.backend} answered with invalid JSON") from None
        filters.filter_completion(answer)  # may raise LeakSuspected: the answer is withheld
        raw = json.dumps(answer, ensure_ascii=False).encode()
        content_type = "application/json"
    trace.overhead_s += time.perf_counter() - after_upstream
    outcome = "ok" if status < 400 else "upstream_error"
    runtime.metrics.overhead.observe(trace.overhead_s)
    runtime.metrics.count_request(ctx.endpoint, ctx.data_class, trace.backend or "-", status)
    runtime.audit.record_decision(trace.decision(status, outcome, None if status < 400 else f"upstream HTTP {status}"))
    passed = {k: v for k, v in upstream.headers.items() if k.lower() in _PASSED_HEADERS
              or k.lower().startswith("x-ratelimit-")}
    return Response(raw, status_code=status, media_type=None,
                    headers={**passed, "content-type": content_type, **_response_headers(trace, trace.overhead_s)})


@dataclass
class _StreamEnd:
    status: int = 200
    outcome: str = "ok"
    reason: str | None = None


def stream_response(runtime: GatewayRuntime, ctx: RequestContext, upstream: UpstreamResponse, trace: RequestTrace,
                    lease: LimitLease, received_at: float) -> Response:
    """Pass a streamed answer through (filtered when hooks are configured); the stream owns ``lease``."""
    filters = _answer_filter(runtime, ctx)
    end = _StreamEnd()

    async def filtered(filters: AnswerFilter) -> AsyncIterator[bytes]:
        decoder = SSEDecoder()
        async for chunk in upstream.aiter_raw():
            started = time.perf_counter()
            out: list[bytes] = []
            for event in decoder.feed(chunk):
                out.extend(_filter_event(event, filters))
            trace.overhead_s += time.perf_counter() - started
            if out:
                yield b"".join(out)
        tail = decoder.rest()
        out = list(_filter_event(tail, filters)) if tail.strip() else []
        out.extend(encode_event(c) for c in filters.flush())
        if out:
            yield b"".join(out)

    def ending(exc: Exception) -> bytes:
        """The last event of a stream that could not go on, and what the audit log says about it."""
        if isinstance(exc, LeakSuspected):
            end.status, end.outcome, end.reason = exc.status_code, "leak", f"{exc.code}: {exc.message}"
            runtime.metrics.leaks.inc()
            return encode_event(exc.to_body())
        if isinstance(exc, httpx.HTTPError | _UnreadableStream):
            end.status, end.outcome, end.reason = 502, "upstream_error", f"stream broke: {type(exc).__name__}"
            error = GatewayError(f"backend {trace.backend} broke off the stream ({exc})", code="upstream_stream_error")
            return encode_event(error.to_body())
        if isinstance(exc, GatewayError):
            # e.g. a filter that cannot check the rest of the answer: stop it, say why (fail closed)
            end.status, end.outcome, end.reason = exc.status_code, "error", f"{exc.code}: {exc.message}"
            return encode_event(exc.to_body())
        log.error("request %s: the answer stream failed", trace.request_id, exc_info=exc)
        end.status, end.outcome, end.reason = 500, "error", f"internal: {type(exc).__name__}"
        return encode_event(GatewayError(f"internal gateway error (request {trace.request_id})").to_body())

    async def on_close() -> None:
        await upstream.aclose()
        await lease.release()
        runtime.metrics.in_flight.dec()
        runtime.metrics.overhead.observe(trace.overhead_s)
        runtime.metrics.count_request(ctx.endpoint, ctx.data_class, trace.backend or "-", end.status)
        runtime.audit.record_decision(trace.decision(end.status, end.outcome, end.reason))

    overhead = trace.overhead_s + (time.perf_counter() - received_at)
    trace.overhead_s = overhead
    content = filtered(filters) if filters is not None else upstream.aiter_raw()
    return ClosingStream(content, on_close, ending, status_code=200, media_type="text/event-stream",
                         headers={"cache-control": "no-cache", **_response_headers(trace, overhead)})


def _filter_event(event: bytes, filters: AnswerFilter) -> list[bytes]:
    data = event_data(event)
    if data is None:
        return [event + b"\n\n"]  # comments / keep-alives pass through
    if data.strip() == "[DONE]":
        return [*(encode_event(c) for c in filters.flush()), encode_event("[DONE]")]
    try:
        chunk = json.loads(data)
    except ValueError:
        # An event we cannot read is an event we cannot filter: end the stream rather than pass it on.
        raise _UnreadableStream("the backend sent a stream event that is not JSON") from None
    if isinstance(chunk, dict) and "choices" in chunk:
        filters.filter_chunk(chunk)
    return [encode_event(chunk)]
