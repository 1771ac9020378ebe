"""The request path: authenticate, limit, run hooks, route, cap, salt, forward (the answer path is
``answer.py``).

Errors the caller or the policy causes are :class:`GatewayError` and become OpenAI-shaped error
answers; anything else is an internal fault: logged with the request id, answered 500, never as
success.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kvfence.gateway.admission.api_counts import API_ENDPOINTS
from kvfence.gateway.admission.caps import CapResult, count_prompt, enforce_cap
from kvfence.gateway.admission.limits import LimitLease
from kvfence.gateway.admission.request_shape import check_request_shape
from kvfence.gateway.admission.usage import (
    Reservation,
    StreamUsage,
    completion_reservation,
    wants_usage_injection,
)
from kvfence.gateway.answer.relay import OwnedStream, json_error, stream_response, whole_response
from kvfence.gateway.apis import ApiCall, new_call
from kvfence.gateway.apis.chat_via_messages import ChatViaMessagesCall
from kvfence.gateway.apis.messages import CountTokensCall
from kvfence.gateway.apis.request_model import admit
from kvfence.gateway.errors import (
    DetectorFailure,
    GatewayError,
    GatewayRequestError,
    LeakSuspected,
    PayloadTooLarge,
    PromptTooLongError,
    UpstreamUnavailable,
)
from kvfence.gateway.hooks import RequestContext
from kvfence.gateway.policy.plans import UpstreamPlan, parse_forwardable, with_cache_salt
from kvfence.gateway.policy.schema import ApiName
from kvfence.gateway.records.trace import RequestTrace
from kvfence.gateway.routing.cache_salt import apply_cache_salt, tenant_cache_salt
from kvfence.gateway.routing.classes import requested_classes
from kvfence.gateway.runtime import BackendState, GatewayRuntime
from kvfence.gateway.transport.hang_up import CLIENT_GONE_STATUS, HangUpWatch
from kvfence.gateway.transport.upstream import NOT_SENT_ERRORS
from kvfence.http import timing_probe
from kvfence.openai_wire import InvalidJSON, one_line

__all__ = ["handle_completion"]

log = logging.getLogger("kvfence.gateway")

DATA_CLASS_HEADER = b"x-data-class"
# The request headers the request path reads (ASGI servers give names in lower case).
_WANTED_HEADERS = (b"authorization", b"x-api-key", b"api-key", DATA_CLASS_HEADER, b"content-length")
_BIG_BODY = 64 * 1024  # count tokens off the event loop above this size
# Upstream answers that send the request to the next allowed backend. Only the ones that say the
# backend itself is unwell also take it out of rotation for a while; a 429 may be one account's
# quota and a 500 one request's fault, so those only fall back for this request.
_RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
_UNHEALTHY_STATUS = frozenset({502, 503, 504})


async def handle_completion(runtime: GatewayRuntime, request: Request, endpoint: str) -> Response:
    """Serve ``/v1/chat/completions`` (endpoint="chat"), ``/v1/completions``, and the other APIs
    (``responses``, ``messages``, ``count_tokens``, ``embeddings``: :mod:`kvfence.gateway.apis`) on the
    same path: only their adapter's answers to "where is the text, which backend, which path" differ."""
    runtime = runtime.pinned()  # this request's policy generation, to its end, whatever a reload does
    trace = RequestTrace(request_id=_request_ids.next(), endpoint=endpoint, started=time.perf_counter())
    metrics = runtime.metrics
    lease: LimitLease | None = None
    ctx: RequestContext | None = None
    call: ApiCall | None = None
    watch: HangUpWatch | None = None
    handed_off = False
    metrics.requests_in_flight += 1
    runtime.quiet.busy()
    try:
        wanted = _wanted_headers(request.scope["headers"])
        tenant = runtime.tenants.authenticate(wanted[b"authorization"], wanted[b"x-api-key"] or wanted[b"api-key"])
        trace.tenant, trace.organization, trace.workspace = tenant.name, tenant.organization, tenant.workspace
        lease = await runtime.limiter.acquire(tenant)
        raw_body = await _read_limited(request, wanted[b"content-length"], runtime.policy.gateway.max_body_bytes)
        # From here on the only message left is the disconnect: a hang-up cancels whatever we wait on.
        watch = HangUpWatch(request.receive)
        body, forwardable = _parse_body(raw_body)
        if endpoint in API_ENDPOINTS:
            call = new_call(endpoint, body)
            call.check(body)  # the API's allowlist model: a 400 naming the field
        else:
            check_request_shape(body, endpoint)
            admitted = admit(endpoint, body)  # the allowlist (apis/request_model.py): unknown fields are a 400
            if admitted is not body:
                body, forwardable = admitted, False
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise GatewayRequestError("`model` is required and must be a string", param="model")
        trace.model, trace.stream = model, bool(body.get("stream")) and (call is None or call.streams)
        ctx = RequestContext(
            request_id=trace.request_id, tenant=tenant, data_class=tenant.default_class, backend=None,
            endpoint=endpoint, class_order=runtime.class_order, incidents=runtime.audit,
            policy=runtime.policy, model=model, stream=trace.stream,
        )
        trace.initial_class = trace.data_class = ctx.data_class
        trace.annotations = ctx.annotations
        asked = wanted[DATA_CLASS_HEADER]
        # The header can raise the class, never lower it below the tenant's default; given several
        # times (or as a list) the most sensitive wins, and an unknown name is a 400.
        if asked is not None:
            for name in requested_classes([asked]):
                if not ctx.raise_class(name, reason="header"):
                    ctx.annotations["header_class_ignored"] = name
        if isinstance(call, CountTokensCall):
            # answered here, from the request as sent: nothing of its text leaves the gateway
            return _count_tokens(runtime, ctx, body, trace)
        for hook in runtime.hooks:
            try:
                body = await hook.on_request(ctx, body)
            except GatewayError:
                raise
            except Exception as exc:
                # Fail closed: a hook that breaks means the body was not checked; never forward it.
                log.exception("request %s: hook %s failed", trace.request_id, type(hook).__name__)
                raise DetectorFailure(f"data-protection check failed ({type(exc).__name__}); the request "
                                      "was not forwarded") from exc
        trace.data_class = ctx.data_class
        if call is not None:
            call.check_class(runtime.policy.data_class(ctx.data_class))
        if ctx.data_class != ctx.initial_class:
            metrics.class_raised.labels(ctx.data_class).inc()
        # The client's own bytes can go upstream when nothing rewrote the body (no hooks) and every
        # JSON parser reads them as we did (plans.parse_forwardable); else the body is serialised again.
        raw = raw_body if forwardable and not runtime.hooks and call is None else None
        response = await _route_and_forward(runtime, ctx, body, raw, trace, lease, watch,
                                            big=len(raw_body) > _BIG_BODY, call=call)
        handed_off = isinstance(response, OwnedStream)  # the stream stops the watch when it ends
        return response
    except asyncio.CancelledError:
        if watch is None or not watch.absorb():
            raise
        if ctx is not None:
            trace.data_class = ctx.data_class
        runtime.metrics.count_request(endpoint, trace.data_class or "-", trace.backend or "-", CLIENT_GONE_STATUS)
        runtime.audit.record_decision(trace.decision(CLIENT_GONE_STATUS, "client_gone",
                                                     "the client hung up before the answer started"))
        return Response(b"", status_code=CLIENT_GONE_STATUS)  # nobody will read it
    except GatewayError as exc:
        if ctx is not None:
            trace.data_class = ctx.data_class  # a class raised just before the refusal is still logged
        return _refuse(runtime, trace, exc, call=call)
    except Exception:
        log.exception("request %s: internal error", trace.request_id)
        error = GatewayError(f"internal gateway error (request {trace.request_id})")
        return _refuse(runtime, trace, error, outcome="error", call=call)
    finally:
        if not handed_off:
            if watch is not None:
                watch.stop()
            if lease is not None:
                await lease.release()
            metrics.requests_in_flight -= 1


class _RequestIds:
    """``gwreq-`` and 80 random bits. Random, not a counter: the id goes upstream, and a count would
    tell a shared backend how busy the gateway (all its tenants) is. The bits come from the OS's
    generator 4 KiB at a time, not one system call per request; a forked worker draws its own."""

    _SIZE = 10

    def __init__(self) -> None:
        self._pool = b""
        self._at = 0

    def next(self) -> str:
        at = self._at
        if at + self._SIZE > len(self._pool):
            self._pool, at = os.urandom(4096), 0
        self._at = at + self._SIZE
        return "gwreq-" + self._pool[at:at + self._SIZE].hex()

    def forget(self) -> None:
        """Drop the bits drawn so far (in a forked child: its parent may use them too)."""
        self._pool, self._at = b"", 0


_request_ids = _RequestIds()
os.register_at_fork(after_in_child=_request_ids.forget)


def _refuse(runtime: GatewayRuntime, trace: RequestTrace, exc: GatewayError, outcome: str | None = None,
            call: ApiCall | None = None) -> JSONResponse:
    if outcome is None:
        outcome = "leak" if isinstance(exc, LeakSuspected) else (
            "upstream_error" if isinstance(exc, UpstreamUnavailable) else "rejected")
    if exc.status_code < 500:  # a client's mistake: one line (at info), never a traceback
        log.info("request %s refused: %d %s: %s", trace.request_id, exc.status_code, exc.code, one_line(exc.message))
    runtime.metrics.rejections.labels(exc.code).inc()
    runtime.metrics.requests.labels(trace.endpoint, trace.data_class or "-", trace.backend or "-",
                                    str(exc.status_code)).inc()
    if isinstance(exc, LeakSuspected):
        runtime.metrics.leaks.inc()
    runtime.audit.record_decision(trace.decision(exc.status_code, outcome, f"{exc.code}: {exc.message}"))
    return json_error(exc, {"X-Request-Id": trace.request_id}, call)


def _count_tokens(runtime: GatewayRuntime, ctx: RequestContext, body: dict[str, Any],
                  trace: RequestTrace) -> Response:
    """``/v1/messages/count_tokens`` with the counter of the backend this class would be sent to."""
    decision = runtime.route(ctx.tenant, ctx.data_class, ctx.model)
    if not decision.allowed:
        raise UpstreamUnavailable(f"no backend is allowed for class {ctx.data_class!r}")
    state = runtime.backends[decision.allowed[0].name]
    tokens = count_prompt(state.counter, "count_tokens", body)
    trace.backend = state.config.name
    runtime.metrics.count_request(ctx.endpoint, ctx.data_class, state.config.name, 200)
    runtime.audit.record_decision(trace.decision(200, "ok", None))
    return JSONResponse({"input_tokens": tokens}, headers={"X-Request-Id": trace.request_id,
                                                           "X-Kvfence-Token-Count": state.counter.description
                                                           if hasattr(state.counter, "description") else ""})


def _wanted_headers(raw_headers: list[tuple[bytes, bytes]]) -> dict[bytes, str | None]:
    """The first value of each header in ``_WANTED_HEADERS`` (None if absent), in one pass over the
    raw list: Starlette's ``Headers`` builds a mapping and scans it again on every lookup."""
    found: dict[bytes, str | None] = dict.fromkeys(_WANTED_HEADERS)
    for name, value in raw_headers:
        if name in found:
            if found[name] is None:
                found[name] = value.decode("latin-1")
            elif name == DATA_CLASS_HEADER:  # every X-Data-Class counts: a later one must not be lost
                found[name] = f"{found[name]},{value.decode('latin-1')}"
    return found


async def _read_limited(request: Request, declared: str | None, limit: int) -> bytes:
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _body_too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:  # the ASGI messages themselves: Request.stream() adds a generator per request
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise GatewayRequestError("the client hung up before sending the whole request body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _body_too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _body_too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body over {limit} bytes (gateway.max_body_bytes)")


def _parse_body(raw: bytes) -> tuple[dict[str, Any], bool]:
    try:
        body, forwardable = parse_forwardable(raw)
    except InvalidJSON as exc:
        raise GatewayRequestError(exc.message, code=exc.code) from None
    except ValueError:
        raise GatewayRequestError("the request body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise GatewayRequestError("the request body must be a JSON object")
    return body, forwardable


def _prepare(runtime: GatewayRuntime, state: BackendState, ctx: RequestContext, body: dict[str, Any],
             raw: bytes | None, trace: RequestTrace,
             call: ApiCall | None = None
             ) -> tuple[bytes, CapResult, bool, UpstreamPlan, str, dict[str, str], ApiCall | None]:
    """Per-backend request: the body (upstream model name, cap, maybe trimmed, salt, and for a
    token-limited tenant's stream a request for usage: True when the gateway added it) as bytes.

    ``raw``, the client's bytes when they may be forwarded, is used unless this backend needs the
    body changed beyond the salt, which is spliced in."""
    backend = state.config
    out = dict(body)
    upstream_model = backend.upstream_model(ctx.model)
    out["model"] = upstream_model
    klass = runtime.policy.data_class(ctx.data_class)
    plan = runtime.upstream_plan(state, ctx.tenant, klass)
    limits = [v for v in (ctx.tenant.limits.max_prompt_tokens, klass.max_prompt_tokens) if v is not None]
    cap = enforce_cap(out, ctx.endpoint, state.counter, prompt_limit=min(limits) if limits else None,
                      context_limit=state.capacity.max_context, over_cap=klass.over_cap,
                      kv_capacity=state.capacity.kv_capacity_tokens, shares_prompt=state.capacity.shares_prompt,
                      scores_max_tokens_0=state.capacity.scores_max_tokens_0)
    salt = plan.salt
    if plan.salt_per_request and plan.salt_scope is not None:
        salt = tenant_cache_salt(ctx.tenant, plan.salt_scope, runtime.secret or b"")
    path = "/chat/completions" if ctx.endpoint == "chat" else "/completions"
    extra_headers: dict[str, str] = {}
    if call is None and ctx.endpoint == "chat" and ApiName.OPENAI not in backend.apis:
        call = ChatViaMessagesCall(body)  # a backend that speaks only Anthropic's API: translated
    if call is not None:
        if call.endpoint == "embeddings":
            salt = None  # no prefix cache to split: the field would only be refused
        path, out, extra_headers = call.upstream(backend, out)
    stripped = apply_cache_salt(out, salt)
    trace.salt_stripped = stripped or trace.salt_stripped
    trace.salt_injected = salt is not None
    usage_injected = False
    if (trace.stream and call is None and ctx.tenant.limits.tokens_per_minute is not None and backend.stream_usage
            and wants_usage_injection(out)):
        options = out.get("stream_options")
        out["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        usage_injected = True
    unchanged = (raw is not None and call is None and upstream_model == ctx.model and not stripped
                 and not usage_injected
                 and cap.tokens_cut == 0 and out.get("messages") is body.get("messages"))
    if unchanged and raw is not None:
        content = raw if salt is None else with_cache_salt(raw, salt, has_keys=bool(body))
    else:
        content = json.dumps(out).encode()
    return content, cap, usage_injected, plan, path, extra_headers, call


async def _route_and_forward(runtime: GatewayRuntime, ctx: RequestContext, body: dict[str, Any],
                             raw: bytes | None, trace: RequestTrace, lease: LimitLease, watch: HangUpWatch | None,
                             *, big: bool, call: ApiCall | None = None) -> Response:
    decision = runtime.route(ctx.tenant, ctx.data_class, ctx.model)
    if decision.refused:
        ctx.annotations["refused_backends"] = dict(decision.refused)
    now = time.monotonic()
    states = [runtime.backends[b.name] for b in decision.allowed]
    if call is not None or any(ApiName.OPENAI not in s.config.apis for s in states):
        usable = call.usable if call is not None else (lambda backend: ApiName.OPENAI in backend.apis or (
            ctx.endpoint == "chat" and ApiName.ANTHROPIC in backend.apis))  # chat translates to Messages
        unable = [s.config.name for s in states if not usable(s.config)]
        states = [s for s in states if usable(s.config)]
        if not states:
            raise UpstreamUnavailable(f"no backend allowed for class {ctx.data_class!r} can serve /v1/{ctx.endpoint}"
                                      f" (failing closed): {', '.join(unable) or 'none allowed'} cannot "
                                      "(policy: the backend's apis and vendor facts)")
    # Backends that failed a moment ago go last, not away: if all are down, each still gets a try.
    if len(states) > 1:
        states.sort(key=lambda s: s.is_down(now))
    failures: list[str] = []
    maybe_generated = 0  # failures after the request may have reached a backend (see NOT_SENT_ERRORS)
    cap_error: PromptTooLongError | None = None
    prompt_charged = False
    for attempt, state in enumerate(states):
        try:
            if big:
                content, cap, usage_injected, plan, path, extra, this_call = await asyncio.to_thread(
                    _prepare, runtime, state, ctx, body, raw, trace, call)
            else:
                content, cap, usage_injected, plan, path, extra, this_call = _prepare(
                    runtime, state, ctx, body, raw, trace, call)
        except PromptTooLongError as exc:
            cap_error = cap_error or exc
            failures.append(f"{state.config.name}: over its cap")
            continue
        trace.cap, trace.backend, ctx.backend = cap, state.config.name, state.config
        token_limited = ctx.tenant.limits.tokens_per_minute is not None
        if token_limited and not prompt_charged:
            # counted by the same tokenizer as the cap, once (a fallback resends the same prompt); the
            # most the answer can cost is reserved until it ends (limits.py)
            reserve = (Reservation(0) if ctx.endpoint == "embeddings"  # an embedding generates nothing
                       else completion_reservation(body, cap, ctx.tenant.limits.tokens_per_minute))
            await lease.admit_prompt(cap.total_prompt_tokens, reserve.tokens,  # may refuse: 429
                                     shrinkable=reserve.shrinkable)
            prompt_charged = True
            runtime.metrics.count_tokens(ctx.tenant.name, "prompt", "count", cap.total_prompt_tokens)
        if cap.tokens_cut:
            runtime.metrics.tokens_cut.inc(cap.tokens_cut)
        if trace.salt_stripped:
            runtime.metrics.salts_stripped.inc()
        headers = dict(plan.stream_headers if trace.stream else plan.headers)
        headers["x-request-id"] = trace.request_id
        headers.update(extra)
        sent_at = time.perf_counter()
        trace.overhead_s = sent_at - trace.started
        if timing_probe.enabled():
            timing_probe.mark(trace.request_id, "entered", trace.started)
            timing_probe.mark(trace.request_id, "sent", sent_at)
        try:
            upstream = await state.client.post(path, content, headers)
        except httpx.HTTPError as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            runtime.mark_down(state, reason)
            failures.append(f"{state.config.name}: {reason}")
            if not isinstance(exc, NOT_SENT_ERRORS):
                # The request may have reached the backend (and be generating, and billed): never sent
                # again, and at most one other backend gets it after such a failure.
                maybe_generated += 1
                if maybe_generated > 1:
                    break
            _note_fallback(runtime, states, attempt, trace)
            continue
        runtime.metrics.observe_upstream(state.config.name, time.perf_counter() - sent_at)
        if upstream.status_code in _RETRYABLE_STATUS and attempt + 1 < len(states):
            try:
                await upstream.aread()
            finally:
                await upstream.aclose()
            if upstream.status_code in _UNHEALTHY_STATUS:
                runtime.mark_down(state, f"HTTP {upstream.status_code}")
            failures.append(f"{state.config.name}: HTTP {upstream.status_code}")
            _note_fallback(runtime, states, attempt, trace)
            continue
        runtime.mark_up(state)
        received_at = time.perf_counter()
        if timing_probe.enabled():
            timing_probe.mark(trace.request_id, "headers", received_at)
        # A backend that ignored `stream` answers with one JSON body: treat it as the whole answer.
        is_sse = "text/event-stream" in upstream.headers.get("content-type", "")
        if trace.stream and upstream.status_code == 200 and is_sse:
            usage = (StreamUsage(state.counter, injected=usage_injected) if token_limited and this_call is None
                     else None)
            return stream_response(runtime, ctx, upstream, trace, lease, received_at, watch, usage, this_call,
                                   state.counter if token_limited else None)
        return await whole_response(runtime, ctx, upstream, trace, lease, state.counter if token_limited else None,
                                    this_call)
    if cap_error is not None:
        raise cap_error  # no allowed backend that is up can hold it: a 400 the caller can act on
    refused = "".join(f"; {name}: not allowed ({why})" for name, why in decision.refused.items())
    raise UpstreamUnavailable(f"no allowed backend for class {ctx.data_class!r} could take the request "
                              f"(failing closed): {'; '.join(failures)}{refused}")


def _note_fallback(runtime: GatewayRuntime, states: list[BackendState], attempt: int, trace: RequestTrace) -> None:
    if attempt + 1 < len(states):
        trace.fallbacks += 1
        runtime.metrics.fallbacks.labels(states[attempt].config.name, states[attempt + 1].config.name).inc()

