"""The ASGI application: routes, authentication, and loading the model in the background.

The server listens before the model has loaded, so health checks and clients get a clear 503
("loading") instead of a refused connection; a load failure stops the server with the error.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import AsyncIterator, Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kvfence.engine.interface import Engine
from kvfence.engine.sampling.generation_defaults import sampling_defaults_for
from kvfence.server.api_errors import APIError
from kvfence.server.async_engine import AsyncEngine
from kvfence.server.auth.keys import KeyRing
from kvfence.server.auth.middleware import AuthMiddleware
from kvfence.server.config import ServerConfig
from kvfence.server.metrics import ServerMetrics
from kvfence.server.openai.prepare import LoadedModel
from kvfence.server.openai.serving import OpenAIServing
from kvfence.server.openai.tokenize import detokenize, tokenize

__all__ = ["PUBLIC_PATHS", "create_app", "describe_startup"]

log = logging.getLogger("kvfence.server")

# Readable without an API key: they carry no tenant data.
PUBLIC_PATHS = frozenset({"/health", "/metrics", "/v1/capacity", "/version"})


# vLLM's tokenizer routes live outside /v1 but run for a caller, so they need a key too.
_PROTECTED_OUTSIDE_V1 = frozenset({"/tokenize", "/detokenize"})


def _is_protected(path: str) -> bool:
    return (path.startswith("/v1/") and path not in PUBLIC_PATHS) or path in _PROTECTED_OUTSIDE_V1


def describe_startup(config: ServerConfig, model: LoadedModel, num_keys: int | None) -> str:
    """The one start-up line an operator needs: model, pool, advertised context, scope, scrubbing."""
    cap = model.capacity
    weights = " (RANDOM WEIGHTS: output is gibberish by design)" if model.is_random_weights else ""
    scrub = "on" if cap.scrub else "OFF (UNSAFE, benchmark only: freed KV pages are not zeroed)"
    auth = f"{num_keys} API key(s) from {config.keys_path}" if num_keys is not None else "OFF (--no-auth: one local tenant)"
    return (
        f"kvfence serve: model={model.public_name}{weights}; KV pool={cap.pool_tokens} tokens "
        f"({cap.num_pages} pages x {cap.page_size}); advertised max context={cap.max_model_len} tokens; "
        f"cache scope={config.cache_scope.value}; scrubbing={scrub}; auth={auth}"
    )


def _package_version() -> str:
    try:
        return package_version("kvfence")
    except PackageNotFoundError:
        return "unknown"


def _loaded_model(engine: Engine, config: ServerConfig) -> LoadedModel:
    tokenizer = engine.tokenizer
    names = config.served_model_names or (engine.model_name,)
    return LoadedModel(
        name=engine.model_name,
        served_names=tuple(names),
        tokenizer=tokenizer,
        capacity=engine.capacity,
        is_random_weights=engine.is_random_weights,
        vocab_size=tokenizer.vocab_size,
        sampling_defaults=_sampling_defaults(engine, config),
        serves_prompt_only=engine.serves_prompt_only,
    )


def _sampling_defaults(engine: Engine, config: ServerConfig) -> dict[str, float | int]:
    defaults = sampling_defaults_for(config.generation_config, engine.model_dir)
    if defaults:
        shown = ", ".join(f"{k}={v}" for k, v in defaults.items())
        where = "the model's" if config.generation_config == "auto" else f"{config.generation_config}'s"
        log.info("sampling defaults from %s generation_config.json (for fields a request leaves out; "
                 "--generation-config vllm turns them off): %s", where, shown)
    return defaults


def create_app(
    config: ServerConfig,
    engine_factory: Callable[[], Engine],
    *,
    secret: bytes,
    keyring: KeyRing | None,
    on_fatal: Callable[[BaseException], None] | None = None,
    freeze_heap: bool = False,
) -> Starlette:
    """Build the app. ``engine_factory`` builds the ``LLMEngine`` (in a background thread);
    ``keyring=None`` serves one local tenant without authentication (``--no-auth``).
    ``freeze_heap`` (the ``kvfence serve`` process, not an app embedded in another program): once
    the model is loaded, ``gc.freeze()`` what the process holds."""
    metrics = ServerMetrics()
    serving = OpenAIServing(config, metrics, secret, keyring)
    holder: dict[str, AsyncEngine] = {}

    def load() -> None:
        try:
            engine = engine_factory()
            model = _loaded_model(engine, config)
            async_engine = AsyncEngine(engine, max_pending=engine.max_num_seqs + config.max_queue_len)
            async_engine.start()
            holder["engine"] = async_engine
            metrics.stats_source = async_engine.stats
            cap = model.capacity
            metrics.cache_config.labels(
                str(cap.page_size), str(cap.num_pages), str(cap.pool_tokens), str(cap.max_model_len),
                config.cache_scope.value, str(bool(cap.scrub)).lower(),
            ).set(1)
            if freeze_heap:
                # The model, the engine and every module imported so far live as long as the process:
                # out of the cyclic collector's reach, so its full collections scan the requests'
                # objects only (collections were 2.7 % of batch-1 decode CPU). Before attach: ready
                # means frozen. Not for an embedded app: it freezes its host's objects too.
                gc.collect()
                gc.freeze()
            serving.attach(async_engine, model)
            log.info(describe_startup(config, model, len(keyring) if keyring is not None else None))
        except BaseException as exc:
            log.error("the model could not be loaded: %s", exc, exc_info=not hasattr(exc, "exit_code"))
            if on_fatal is not None:
                on_fatal(exc)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loader = threading.Thread(target=load, name="kvfence-loader", daemon=True)
        loader.start()
        try:
            yield
        finally:
            engine = holder.get("engine")
            if engine is not None:
                engine.stop()

    def on_reject(exc: APIError) -> None:
        metrics.rejections.labels(exc.reason).inc()

    async def not_found(request: Request, exc: Exception) -> Response:
        return APIError.not_found(f"no route for {request.method} {request.url.path}").response()

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        return APIError(405, f"method {request.method} is not allowed on {request.url.path}",
                        code="method_not_allowed").response()

    async def version(request: Request) -> Response:
        # As vLLM's /version: lets an auditor (kvfence audit engine) match the engine against advisories.
        return JSONResponse({"engine": "kvfence", "version": _package_version()})

    async def tokenize_route(request: Request) -> Response:
        return await tokenize(serving, request)

    async def detokenize_route(request: Request) -> Response:
        return await detokenize(serving, request)

    async def internal_error(request: Request, exc: Exception) -> Response:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return APIError.internal().response()

    routes = [
        Route("/v1/completions", serving.completions, methods=["POST"]),
        Route("/v1/chat/completions", serving.chat_completions, methods=["POST"]),
        Route("/v1/responses", serving.responses, methods=["POST"]),
        Route("/v1/messages", serving.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", serving.count_tokens, methods=["POST"]),
        Route("/v1/models", serving.list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", serving.retrieve_model, methods=["GET"]),
        Route("/v1/capacity", serving.capacity, methods=["GET"]),
        Route("/health", serving.health, methods=["GET"]),
        Route("/metrics", serving.metrics_text, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/tokenize", tokenize_route, methods=["POST"]),
        Route("/detokenize", detokenize_route, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(AuthMiddleware, keyring=keyring, is_protected=_is_protected, on_reject=on_reject)],
        lifespan=lifespan,
        exception_handlers={404: not_found, 405: method_not_allowed, Exception: internal_error},
    )
    app.state.serving = serving
    app.state.metrics = metrics
    return app
