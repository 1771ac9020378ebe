"""The gateway's ASGI application: the OpenAI-compatible surface plus ``/metrics`` and ``/health``."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from kvfence.gateway.answer.relay import json_error
from kvfence.gateway.apis import API_PATHS
from kvfence.gateway.errors import AuthenticationFailed, GatewayError
from kvfence.gateway.proxy import handle_completion
from kvfence.gateway.records.metrics import without_tenants
from kvfence.gateway.reload import PolicyReloader
from kvfence.gateway.runtime import GatewayRuntime
from kvfence.gateway.workers.metrics import merged_worker_metrics
from kvfence.http import timing_probe
from kvfence.metrics_key import matches

__all__ = ["GatewayApp", "build_app"]

log = logging.getLogger("kvfence.gateway")


# The hot endpoints, served without Starlette's router and middleware stack (see GatewayApp).
_COMPLETION_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", **API_PATHS}


class GatewayApp:
    """Pure ASGI front: ``POST`` to the completion endpoints goes straight to the request path;
    everything else (``/v1/models``, ``/metrics``, ``/health``, lifespan, 404 and 405 answers) to a
    Starlette app.

    Starlette's router, exception middlewares and per-send wrappers are cheap for one request but
    not per streamed chunk at 100 concurrent streams; ``handle_completion`` catches every error of
    its own, so on this path they had nothing to do.
    """

    def __init__(self, runtime: GatewayRuntime, rest: Starlette) -> None:
        self.runtime = runtime
        self.rest = rest
        self.reloader: PolicyReloader | None = None  # set while the lifespan runs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = _COMPLETION_PATHS.get(scope["path"])
            if endpoint is not None:
                if timing_probe.enabled():
                    send = timing_probe.watch_send(scope, send)
                response = await handle_completion(self.runtime, Request(scope, receive), endpoint)
                await response(scope, receive, send)
                return
        await self.rest(scope, receive, send)

    async def completion_response(self, scope: Scope, receive: Receive) -> Response | None:
        """The lean server's hot path (``kvfence.http.server.HotPath``): the answer to a POST to a completion
        endpoint as a Response object (the server may relay a stream itself), None for anything else."""
        endpoint = _COMPLETION_PATHS.get(scope["path"])
        if endpoint is None or scope["method"] != "POST":
            return None
        return await handle_completion(self.runtime, Request(scope, receive), endpoint)


def build_app(runtime: GatewayRuntime, *, freeze_heap: bool = False,
              on_started: Callable[[], None] | None = None) -> GatewayApp:
    """An app serving ``runtime``; its lifespan starts and closes the runtime (then calls
    ``on_started``: a worker tells its supervisor it is up).

    ``freeze_heap`` (the ``kvfence gateway`` process, not an app embedded in another program): once
    the runtime and the server are up, move every object alive then out of the cyclic collector's
    reach (``gc.freeze``). What the server imports as it starts (thousands of functions and classes)
    would otherwise be scanned again by every full collection, a pause every stream in flight waits.
    """

    async def chat(request: Request) -> Response:
        return await handle_completion(runtime, request, "chat")

    async def completions(request: Request) -> Response:
        return await handle_completion(runtime, request, "completions")

    async def models(request: Request) -> Response:
        try:
            runtime.tenants.authenticate(request.headers.get("authorization"),
                                           request.headers.get("x-api-key") or request.headers.get("api-key"))
        except GatewayError as exc:
            return json_error(exc)
        names: dict[str, str] = {}
        for state in runtime.backends.values():
            # configured names, or what the backend itself lists when the policy names none
            listed = [*state.config.models, *state.config.model_map] or list(state.capacity.model_ids)
            for name in listed:
                names.setdefault(name, state.config.name)
        data = []
        for name in sorted(names):
            entry: dict[str, object] = {"id": name, "object": "model", "owned_by": "kvfence-gateway"}
            limits = [s.capacity.max_context for s in runtime.backends.values()
                      if s.config.serves(name) and s.capacity.max_context is not None]
            if limits:
                entry["max_model_len"] = max(limits)
            data.append(entry)
        return JSONResponse({"object": "list", "data": data})

    async def metrics(request: Request) -> Response:
        # Per-tenant series for the metrics key only; without a key configured, everyone gets the
        # series summed over tenants (a tenant's key opens neither: it must not see the others).
        per_tenant = False
        if runtime.metrics_key is not None:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return json_error(AuthenticationFailed("/metrics needs the metrics key: send 'Authorization: "
                                                       "Bearer <key>' with the token of gateway.metrics_key_file"))
            if not matches(runtime.metrics_key, token.strip()):
                return json_error(AuthenticationFailed("incorrect metrics key (tenant API keys do not open /metrics)"))
            per_tenant = True
        runtime.quiet.drain()  # finished streams' counts, not yet booked
        worker = runtime.worker
        if worker is not None and worker.count > 1:  # the sum over every worker, not this one's share
            body = await merged_worker_metrics(runtime.metrics.registry, worker)
        else:
            body = generate_latest(runtime.metrics.registry)
        return Response(body if per_tenant else without_tenants(body), media_type=CONTENT_TYPE_LATEST)

    async def health(request: Request) -> Response:
        # Anonymous, so minimal: whether each backend is up and what it holds; no upstream error text
        # (it can carry URLs, addresses, a backend's own messages), no file paths. The reason a backend
        # is down is in the gateway's log.
        backends = {
            name: {"up": state.last_error is None,
                   "advertised_context": state.capacity.advertised_context,
                   "kv_capacity_tokens": state.capacity.kv_capacity_tokens,
                   "advertises_more_than_it_holds": state.capacity.advertises_more_than_it_holds,
                   "capacity_source": state.capacity.source,
                   "token_count": getattr(state.counter, "description", ""),
                   "http_client": state.client.kind}
            for name, state in runtime.backends.items()
        }
        answer: dict[str, object] = {"status": "ok", "backends": backends}
        if runtime.worker is not None:
            answer["worker"] = {"index": runtime.worker.index, "count": runtime.worker.count, "pid": os.getpid()}
        # the reload's error text names files and lines: it is in the log, not here
        answer["policy"] = {"generation": runtime.generation, "last_reload_failed": runtime.last_reload_error is not None}
        return JSONResponse(answer)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start()
        reloader = PolicyReloader(runtime)
        if runtime.policy_loader is not None:
            reloader.install_signal_handler()  # SIGHUP: reload.py
        gateway_app.reloader = reloader
        if freeze_heap:
            gc.collect()
            gc.freeze()
            runtime.quiet.manage_gc()
        if on_started is not None:
            on_started()
        timing_probe.start_loop_sampler()
        try:
            yield
        finally:
            await reloader.aclose()
            await runtime.close()
            timing_probe.write()

    def api_route(endpoint: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return await handle_completion(runtime, request, endpoint)
        return serve

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        *(Route(path, api_route(endpoint), methods=["POST"]) for path, endpoint in API_PATHS.items()),
        Route("/v1/models", models, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    async def http_error(request: Request, exc: Exception) -> Response:
        status = int(getattr(exc, "status_code", 500))
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
        error = GatewayError(f"no route for {request.method} {request.url.path}" if status in (404, 405)
                             else str(getattr(exc, "detail", "error")), code=code)
        error.status_code = status
        error.error_type = "invalid_request_error"
        return json_error(error)

    # The Starlette app keeps the completion routes too: other methods on them still get a JSON 405.
    rest = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    gateway_app = GatewayApp(runtime, rest)
    return gateway_app
