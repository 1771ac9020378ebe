"""The answer path: whole or streamed upstream answers back to the caller, through the hooks' filters.

Every way a stream can end (done, leak suspected, upstream broke off, client hung up) releases the
request's limits, closes the upstream response, charges the answer's tokens to a token-limited tenant
and writes the audit row exactly once. A stream that must stop ends with an OpenAI-shaped error event,
never with a silent truncation.

A stream is served one of three ways: relayed byte for byte from the lean client's read callback when
nothing needs to see it (no hooks, no token limit: ``stream_out.RelayStream``); passed through chunk
by chunk from httpx; or decoded event by event when hooks filter it or its usage must be counted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.responses import JSONResponse, Response

from kvfence.gateway.admission.limits import LimitLease
from kvfence.gateway.admission.tokens import TokenCounter
from kvfence.gateway.admission.usage import StreamUsage, answer_completion_tokens
from kvfence.gateway.answer.filter import AnswerFilter, FilterChain
from kvfence.gateway.apis.base import ApiCall, NativeStream, parse_event
from kvfence.gateway.errors import GatewayError, LeakSuspected, UpstreamUnavailable
from kvfence.gateway.hooks import RequestContext
from kvfence.gateway.records.trace import RequestTrace
from kvfence.gateway.runtime import GatewayRuntime
from kvfence.gateway.transport.fast_http import FastResponse
from kvfence.gateway.transport.hang_up import CLIENT_GONE_STATUS, HangUpWatch
from kvfence.gateway.transport.stream_end import CUT_SHORT_MESSAGE, chunk_ends_stream
from kvfence.gateway.transport.stream_out import ClosingStream, OwnedStream, RelayStream, checked_stream
from kvfence.gateway.transport.upstream import UpstreamResponse
from kvfence.http import timing_probe
from kvfence.openai_wire import (
    DONE,
    SSE_MEDIA_TYPE,
    SSEDecoder,
    encode_event,
    event_data,
    normalise_error_body,
)

__all__ = ["OVERHEAD_HEADER", "OwnedStream", "charge_completion", "json_error",
           "stream_response", "whole_response"]

log = logging.getLogger("kvfence.gateway")

OVERHEAD_HEADER = "X-Kvfence-Overhead-Ms"
# Upstream headers a caller may act on; everything else from upstream stays behind the gateway.
_PASSED_HEADERS = frozenset({"retry-after", "openai-processing-ms"})


class _UnreadableStream(Exception):
    """An upstream stream event that is not JSON: it cannot be filtered, so it is never passed on."""


def json_error(error: GatewayError, extra_headers: dict[str, str] | None = None,
               call: ApiCall | None = None) -> JSONResponse:
    """An error answer for ``error``: OpenAI's shape, or the shape of ``call``'s API (Anthropic's)."""
    body = error.to_body() if call is None else call.error_body(error)
    return JSONResponse(body, status_code=error.status_code, headers={**error.headers(), **(extra_headers or {})})


def _make_chain(runtime: GatewayRuntime, ctx: RequestContext) -> Callable[[], FilterChain] | None:
    """A fresh chain of every hook's filter for one text slot (None without hooks)."""
    if not runtime.hooks:
        return None
    hooks = list(reversed(runtime.hooks))  # onion order, see hooks.py
    return lambda: FilterChain([h.response_filter(ctx) for h in hooks])


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


_SSE_CONTENT_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")  # as Starlette writes it


def _raw_stream_headers(trace: RequestTrace, overhead_s: float) -> list[tuple[bytes, bytes]]:
    """A stream's response headers, encoded here once (what Starlette's ``init_headers`` would make of
    ``_response_headers`` plus the cache-control and content type, without its generic checks)."""
    raw = [(b"cache-control", b"no-cache"), (b"x-request-id", trace.request_id.encode("latin-1")),
           (b"x-kvfence-overhead-ms", b"%.3f" % (overhead_s * 1000)),
           (b"x-kvfence-data-class", trace.data_class.encode("latin-1")),
           (b"x-kvfence-backend", (trace.backend or "").encode("latin-1"))]
    if trace.cap is not None:
        raw += ((b"x-kvfence-prompt-tokens", b"%d" % trace.cap.prompt_tokens),
                (b"x-kvfence-tokens-trimmed", b"%d" % trace.cap.tokens_cut))
    raw.append(_SSE_CONTENT_TYPE)
    return raw


def _answer_filter(runtime: GatewayRuntime, ctx: RequestContext) -> AnswerFilter | None:
    if not runtime.hooks:
        return None
    hooks = list(reversed(runtime.hooks))  # onion order, see hooks.py
    return AnswerFilter(ctx.endpoint, lambda: FilterChain([h.response_filter(ctx) for h in hooks]))


async def charge_completion(runtime: GatewayRuntime, ctx: RequestContext, lease: LimitLease, tokens: int,
                            source: str) -> None:
    """Charge an answer's completion tokens to its tenant's tokens-per-minute window; note them."""
    ctx.annotations["completion_tokens"] = tokens
    ctx.annotations["completion_tokens_source"] = source
    await lease.add_completion(tokens)
    runtime.metrics.count_tokens(ctx.tenant.name, "completion", source, tokens)


async def whole_response(runtime: GatewayRuntime, ctx: RequestContext, upstream: UpstreamResponse,
                         trace: RequestTrace, lease: LimitLease, counter: TokenCounter | None,
                         call: ApiCall | None = None) -> Response:
    """Read a non-streamed answer (or an upstream error), filter it, log it, answer it. With a
    ``counter`` (the tenant has a token limit) its completion tokens are charged to ``lease``; with a
    ``call`` (another API than chat / completions) its adapter says where the model text is."""
    try:
        raw = await upstream.aread()
    except httpx.HTTPError as exc:
        raise UpstreamUnavailable(f"backend {trace.backend} broke off its answer: {type(exc).__name__}") from exc
    finally:
        await upstream.aclose()
    after_upstream = time.perf_counter()
    status = upstream.status_code
    if status == 200 and _close_framed(upstream.headers) and not _is_json(raw):
        # A body that ends by closing the connection looks the same cut short as complete: an answer
        # that is not whole JSON was cut (or is no answer), never passed on as a success.
        raise UpstreamUnavailable(f"backend {trace.backend} broke off its answer: the connection closed "
                                  "before the JSON body was complete")
    content_type = upstream.headers.get("content-type", "application/json")
    filters = _answer_filter(runtime, ctx) if call is None else None
    answer: Any = None
    if status == 200 and call is not None:
        try:
            answer = json.loads(raw)
        except ValueError:
            raise UpstreamUnavailable(f"backend {trace.backend} answered with invalid JSON") from None
        if not isinstance(answer, dict):
            raise UpstreamUnavailable(f"backend {trace.backend} answered with JSON that is not an object")
        if counter is not None:
            reported = call.output_tokens(answer)
            tokens = (reported, "usage") if reported is not None else (
                counter.count_text("".join(call.answer_texts(answer))), "count")
            await charge_completion(runtime, ctx, lease, *tokens)
        answer = call.filter_whole(answer, _make_chain(runtime, ctx))  # may raise LeakSuspected: withheld
        raw, content_type = json.dumps(answer, ensure_ascii=False).encode(), "application/json"
    elif status == 200 and (filters is not None or counter is not None):
        try:
            answer = json.loads(raw)
        except ValueError:
            if filters is not None:
                raise UpstreamUnavailable(f"backend {trace.backend} answered with invalid JSON") from None
        if counter is not None:
            # counted before the filters: what the backend generated is what the tenant used
            await charge_completion(runtime, ctx, lease, *answer_completion_tokens(answer, counter))
    if status == 200 and filters is not None and call is None:
        filters.filter_completion(answer)  # may raise LeakSuspected: the answer is withheld
        raw = json.dumps(answer, ensure_ascii=False).encode()
        content_type = "application/json"
    elif status in (401, 403):
        # The caller's gateway key is never forwarded: the backend refused the gateway's own upstream
        # credential. Passed on as 401, a client would take its (valid) gateway key for the bad one.
        log.error("backend %s refused the gateway's upstream credential (HTTP %d, request %s)",
                  trace.backend, status, trace.request_id)
        error = GatewayError(f"backend {trace.backend} refused the gateway's credential for it (HTTP {status}); "
                             "this is the gateway's configuration, not your API key: tell its operator",
                             code="upstream_auth_failed")
        body = error.to_body() if call is None else call.error_body(error)
        raw, content_type = json.dumps(body).encode(), "application/json"
    elif status >= 400:
        error_body = (normalise_error_body(raw, status, trace.backend or "-") if call is None
                      else call.upstream_error(raw, status, trace.backend or "-"))
        if error_body is not None:
            raw, content_type = error_body, "application/json"
    trace.overhead_s += time.perf_counter() - after_upstream
    upstream_status, status = status, (502 if status in (401, 403) else status)
    outcome = "ok" if status < 400 else "upstream_error"
    runtime.metrics.overhead.observe(trace.overhead_s)
    runtime.metrics.count_request(ctx.endpoint, ctx.data_class, trace.backend or "-", status)
    runtime.audit.record_decision(trace.decision(status, outcome,
                                                 None if status < 400 else f"upstream HTTP {upstream_status}"))
    passed = {k: v for k, v in upstream.headers.items() if k.lower() in _PASSED_HEADERS
              or k.lower().startswith("x-ratelimit-")}
    return Response(raw, status_code=status, media_type=None,
                    headers={**passed, "content-type": content_type, **_response_headers(trace, trace.overhead_s)})


def _close_framed(headers: Mapping[str, str]) -> bool:
    """True for a body whose only end is the connection closing (no length, no chunked coding)."""
    return headers.get("content-length") is None and "chunked" not in headers.get("transfer-encoding", "").lower()


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


@dataclass
class _StreamEnd:
    status: int = 200
    outcome: str = "ok"
    reason: str | None = None


def stream_response(runtime: GatewayRuntime, ctx: RequestContext, upstream: UpstreamResponse, trace: RequestTrace,
                    lease: LimitLease, received_at: float, watch: HangUpWatch | None,
                    usage: StreamUsage | None, call: ApiCall | None = None,
                    counter: TokenCounter | None = None) -> OwnedStream:
    """Pass a streamed answer through (filtered when hooks are configured, its usage counted when
    ``usage`` is given); the stream owns ``lease``. With a ``call`` (another API) its adapter reads and
    filters each event, always (its end markers are its own), and ``counter`` counts its usage."""
    filters = _answer_filter(runtime, ctx) if call is None else None
    shape = call.stream(_make_chain(runtime, ctx)) if call is not None else None
    if shape is not None and counter is not None:
        usage = _ApiUsage(shape, counter)  # type: ignore[assignment]
    end = _StreamEnd()

    async def api_events() -> AsyncIterator[bytes]:
        assert shape is not None
        decoder = SSEDecoder()

        unchanged = shape.relays_unchanged and usage is None

        def one(event: bytes) -> list[bytes]:
            name, data = parse_event(event)
            if data is None:
                return [event + b"\n\n"]  # comments / keep-alives pass through
            if unchanged and name is not None:  # nothing to filter or count: only its end is looked for
                if name in shape.END_NAMES:
                    shape.ended = True
                return [event + b"\n\n"]
            try:
                return shape.event(name, data)
            except ValueError as exc:  # an event we cannot read is one we cannot filter: end the stream
                raise _UnreadableStream(str(exc)) from None

        async for chunk in upstream.aiter_raw():
            started = time.perf_counter()
            out: list[bytes] = []
            try:
                for event in decoder.feed(chunk):
                    out.extend(one(event))
            except Exception:
                # the events before the one that stops the stream were checked: they go out first, so
                # the error event follows the stream's opening (the SDKs' stream readers require it)
                if out:
                    yield b"".join(out)
                raise
            trace.overhead_s += time.perf_counter() - started
            if out:
                yield b"".join(out)
        tail = decoder.rest()
        out = one(tail) if tail.strip() and _is_whole_event(tail) else []
        out.extend(shape.flush())
        if out:
            yield b"".join(out)
        if not shape.ended:
            raise _UnreadableStream(CUT_SHORT_MESSAGE)

    def error_event(error: GatewayError) -> bytes:
        return encode_event(error.to_body()) if shape is None else shape.error_event(error)

    async def processed() -> AsyncIterator[bytes]:
        decoder = SSEDecoder()
        progress = _StreamProgress()
        async for chunk in upstream.aiter_raw():
            started = time.perf_counter()
            out: list[bytes] = []
            for event in decoder.feed(chunk):
                out.extend(_process_event(event, filters, usage, progress))
            trace.overhead_s += time.perf_counter() - started
            if out:
                yield b"".join(out)
        tail = decoder.rest()
        out = []
        if tail.strip():
            if _is_whole_event(tail):  # a last event without its blank line ("data: [DONE]\n")
                out = list(_process_event(tail, filters, usage, progress))
            else:
                progress.ended = False  # cut inside its last event: never passed on, never complete
        if filters is not None:
            out.extend(encode_event(c) for c in filters.flush())
        if out:
            yield b"".join(out)
        if not progress.ended:
            # A body that ends by closing the connection (no length, no chunked framing) looks the
            # same cut short as complete; only the stream's own end markers tell them apart.
            raise _UnreadableStream(CUT_SHORT_MESSAGE)

    def ending(exc: Exception) -> bytes:
        """The last event of a stream that could not go on, and what the audit log says about it."""
        if isinstance(exc, LeakSuspected):
            end.status, end.outcome, end.reason = exc.status_code, "leak", f"{exc.code}: {exc.message}"
            runtime.metrics.leaks.inc()
            return error_event(exc)
        if isinstance(exc, httpx.HTTPError | _UnreadableStream):
            end.status, end.outcome, end.reason = 502, "upstream_error", f"stream broke: {type(exc).__name__}"
            error = GatewayError(f"backend {trace.backend} broke off the stream ({exc})", code="upstream_stream_error")
            error.status_code = 502
            return error_event(error)
        if isinstance(exc, GatewayError):
            # e.g. a filter that cannot check the rest of the answer: stop it, say why (fail closed)
            end.status, end.outcome, end.reason = exc.status_code, "error", f"{exc.code}: {exc.message}"
            return error_event(exc)
        log.error("request %s: the answer stream failed", trace.request_id, exc_info=exc)
        end.status, end.outcome, end.reason = 500, "error", f"internal: {type(exc).__name__}"
        return error_event(GatewayError(f"internal gateway error (request {trace.request_id})"))

    async def on_close(client_gone: bool) -> None:
        if timing_probe.enabled():
            timing_probe.mark(trace.request_id, "ended")
        await upstream.aclose()
        if client_gone:
            end.status, end.outcome, end.reason = CLIENT_GONE_STATUS, "client_gone", "the client hung up mid-stream"
        try:
            if usage is not None:
                # whatever the ending: the tokens generated so far were generated for this tenant
                await charge_completion(runtime, ctx, lease, *usage.completion_tokens())
        finally:
            await lease.release()
            runtime.metrics.requests_in_flight -= 1
            # the rest can wait for a quiet moment (quiet_time.py); the row keeps this moment's latency
            runtime.quiet.defer(_book_stream, runtime, ctx, trace, end, time.perf_counter())

    overhead = trace.overhead_s + (time.perf_counter() - received_at)
    trace.overhead_s = overhead
    headers = _raw_stream_headers(trace, overhead)
    if shape is not None:
        return ClosingStream(api_events(), on_close, ending, watch, status_code=200, media_type=SSE_MEDIA_TYPE,
                             raw_headers=headers)
    if filters is None and usage is None:
        if isinstance(upstream, FastResponse):
            return RelayStream(upstream, on_close, ending, watch, status_code=200, media_type=SSE_MEDIA_TYPE,
                               raw_headers=headers)
        return ClosingStream(checked_stream(upstream.aiter_raw()), on_close, ending, watch, status_code=200,
                             media_type=SSE_MEDIA_TYPE, raw_headers=headers)
    return ClosingStream(processed(), on_close, ending, watch, status_code=200, media_type=SSE_MEDIA_TYPE,
                         raw_headers=headers)


class _ApiUsage:
    """What a streamed answer of another API cost: the backend's usage from its events, else its text
    counted (the ``StreamUsage`` of chat chunks, for an adapter's stream)."""

    def __init__(self, shape: NativeStream, counter: TokenCounter) -> None:
        self._shape = shape
        self._counter = counter

    def completion_tokens(self) -> tuple[int, str]:
        if self._shape.reported_output_tokens is not None:
            return self._shape.reported_output_tokens, "usage"
        texts = self._shape.texts()
        return (self._counter.count_text("".join(texts)) if texts else 0), "count"


def _book_stream(runtime: GatewayRuntime, ctx: RequestContext, trace: RequestTrace, end: _StreamEnd,
                 ended: float) -> None:
    """A finished stream's metrics and audit row."""
    runtime.metrics.overhead.observe(trace.overhead_s)
    runtime.metrics.count_request(ctx.endpoint, ctx.data_class, trace.backend or "-", end.status)
    runtime.audit.record_decision(trace.decision(end.status, end.outcome, end.reason, ended=ended))


@dataclass
class _StreamProgress:
    """Whether a decoded stream reached its end: ``[DONE]``, a finish_reason, or an error event."""

    ended: bool = False

    def observe(self, chunk: Any) -> None:
        if isinstance(chunk, dict) and chunk_ends_stream(chunk):
            self.ended = True


def _is_whole_event(event: bytes) -> bool:
    """True when an event that lacks its closing blank line still holds a whole payload."""
    try:
        data = event_data(event)
    except UnicodeDecodeError:
        return False
    if data is None or data.strip() == DONE:
        return data is not None
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _process_event(event: bytes, filters: AnswerFilter | None, usage: StreamUsage | None,
                   progress: _StreamProgress | None = None) -> list[bytes]:
    data = event_data(event)
    if data is None:
        return [event + b"\n\n"]  # comments / keep-alives pass through
    if data.strip() == DONE:
        if progress is not None:
            progress.ended = True
        flushed = [encode_event(c) for c in filters.flush()] if filters is not None else []
        return [*flushed, encode_event(DONE)]
    try:
        chunk = json.loads(data)
    except ValueError:
        if filters is None:
            return [event + b"\n\n"]  # nothing to filter, nothing to count in it
        # An event we cannot read is an event we cannot filter: end the stream rather than pass it on.
        raise _UnreadableStream("the backend sent a stream event that is not JSON") from None
    if progress is not None:
        progress.observe(chunk)
    action = usage.observe(chunk) if usage is not None else "pass"
    if action == "drop":
        return []  # the usage chunk the gateway asked for, not the client
    if filters is not None and isinstance(chunk, dict) and "choices" in chunk:
        filters.filter_chunk(chunk)
        return [encode_event(chunk)]
    if action == "edited" or filters is not None:
        return [encode_event(chunk)]
    return [event + b"\n\n"]
