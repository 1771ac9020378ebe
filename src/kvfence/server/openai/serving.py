"""The OpenAI generation endpoints: validated request -> engine requests -> answer.

Order of checks for every call, cheapest and most certain first: authentication (middleware),
model loaded (503), body readable (400/413), fields valid (400), model name (404), prompt plus
``max_tokens`` fits the advertised context (400 ``context_length_exceeded`` *before* anything is
queued, I3), per-key concurrency (429), queue bound (429), engine admission. The cache scope comes
from the authenticated tenant only (I5); ``cache_salt`` narrows it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from kvfence.apis import messages as anthropic
from kvfence.engine.interface import EngineRequest, RequestOutput
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import RequestError
from kvfence.openai_wire import DONE, encode_event, error_body, one_line
from kvfence.scope import CacheScope, compute_scope_key
from kvfence.server.api_errors import APIError, from_request_error
from kvfence.server.async_engine import AsyncEngine, EngineFault, QueueFullError, RequestGroup
from kvfence.server.auth.keys import KeyRing
from kvfence.server.auth.metrics_access import MetricsAccess, MetricsKeyFile, MetricsView
from kvfence.server.auth.middleware import Tenant
from kvfence.server.config import ServerConfig
from kvfence.server.limits import ConcurrencyLimiter
from kvfence.server.metrics import ServerMetrics
from kvfence.server.openai.choices import fan_out, returned_choices
from kvfence.server.openai.native_apis import MessagesAdapter, ResponsesAdapter, anthropic_shaped
from kvfence.server.openai.prepare import (
    LoadedModel,
    chat_prompt,
    check_choices,
    content_format,
    resolve_model_name,
    sampling_params,
    tokenize_prompt,
)
from kvfence.server.openai.prompt_scores import (
    echo_logprobs,
    join_logprobs,
    prompt_logprobs_body,
    prompt_text_offsets,
)
from kvfence.server.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerationRequest,
    check_json_content_type,
    decode_body,
    parse_body,
    validate_body,
)
from kvfence.server.openai.responses import (
    ChoiceState,
    chat_chunk,
    chat_logprobs,
    completion_chunk,
    completion_logprobs,
    usage_body,
)
from kvfence.server.openai.streaming import ClientDisconnected, EventStreamResponse, run_until_disconnect
from kvfence.server.openai.structured import grammar_spec
from kvfence.server.openai.tools import ToolCalling, ToolCallStream, answer_message, tool_calling

__all__ = ["OpenAIServing"]

log = logging.getLogger(__name__)

def _new_logprobs(out: RequestOutput) -> list[dict[int, float]]:
    """This step's logprob entries: ``new_logprobs``, or the tail of the cumulative list."""
    new = out.new_logprobs
    if new is not None:
        return list(new)
    return list(out.logprobs or [])[-len(out.new_token_ids):] if out.new_token_ids else []


class _AbortedByEngine(Exception):
    """The engine ended the request itself (e.g. paranoid mode caught an isolation violation).

    A disaggregated prefill worker's explicit REJECT (I3/I4) is the client's error: 400, not 500.
    """

    def __init__(self, message: str, *, rejected: bool = False) -> None:
        super().__init__(message)
        self.status_code = 400 if rejected else 500
        self.type = "invalid_request_error" if rejected else "server_error"
        self.code = "request_rejected" if rejected else "request_aborted"


class _Lease:
    """What one HTTP generation call holds; :meth:`close` releases it exactly once."""

    def __init__(self, serving: OpenAIServing, tenant: Tenant, endpoint: str) -> None:
        self.serving = serving
        self.tenant = tenant
        self.endpoint = endpoint
        self.group: RequestGroup | None = None
        self.choices: list[ChoiceState] = []  # every engine request's choice (best_of: more than returned)
        self.by_request: dict[str, ChoiceState] = {}
        self.params: list[SamplingParams] = []  # per prompt (n, best_of)
        self.echo: list[str] = []  # per prompt: what its choices' text starts with (completions echo)
        self.prompts: list[list[int]] = []  # per prompt: its token ids
        self.prompt_logprobs: list[Any] = []  # per prompt: its scores once computed (choice 0 computes them)
        self.tools: ToolCalling | None = None  # chat with tool_choice "required" or a named function
        self.status = "error"
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self._closed = False
        serving.metrics.in_flight.inc()

    def saw_output(self, out: Any) -> None:
        if self.first_token_at is None and out.new_token_ids:
            self.first_token_at = time.perf_counter()
            self.serving.metrics.ttft.observe(self.first_token_at - self.started)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.group is not None:
            self.group.abort()  # no-op for finished requests; frees (and scrubs) the rest
        m = self.serving.metrics
        org = self.tenant.identity.organization
        self.serving.limiter.release(self.tenant.key_id)
        m.in_flight.dec()
        m.requests.labels(org, self.endpoint, self.status).inc()
        if self.choices:
            usage = usage_body(self.choices)
            m.prompt_tokens.labels(org).inc(usage["prompt_tokens"])
            m.cached_prompt_tokens.labels(org).inc(usage["prompt_tokens_details"]["cached_tokens"])
            m.generation_tokens.labels(org).inc(usage["completion_tokens"])
        if self.status == "ok":
            m.latency.observe(time.perf_counter() - self.started)


def _stream_failure(rid: str, lease: _Lease, exc: Exception) -> dict[str, Any]:
    """The error event that ends a failed stream: never ``[DONE]``, never counted as success."""
    lease.status = "error"
    if isinstance(exc, _AbortedByEngine):
        log.error("stream %s failed: %s", rid, exc)
        return error_body(str(exc), type=exc.type, code=exc.code)
    if isinstance(exc, EngineFault):
        log.error("stream %s failed: %s", rid, exc)
        return error_body(str(exc), type="server_error", code="request_aborted")
    log.exception("stream %s failed unexpectedly", rid)  # a bug: full trace in the log, not to the client
    return error_body("internal server error; the request was aborted", type="server_error",
                         code="internal_error")


def _usage_payload(kind: str, rid: str, created: int, name: str, lease: _Lease) -> dict[str, Any]:
    """``stream_options.include_usage``: the last chunk before ``[DONE]``, usage and no choices."""
    return {"id": rid, "object": kind, "created": created, "model": name, "choices": [],
            "usage": usage_body(lease.choices)}


def _usage_chunk(kind: str, rid: str, created: int, name: str, lease: _Lease) -> bytes:
    return encode_event(_usage_payload(kind, rid, created, name, lease))


def _with_running_usage(req: GenerationRequest, chunk: dict[str, Any], lease: _Lease) -> dict[str, Any]:
    """``stream_options`` with ``include_usage`` and ``continuous_usage_stats`` (as vLLM): every chunk
    carries the usage so far."""
    if req.include_usage and req.stream_options is not None and req.stream_options.continuous_usage_stats:
        chunk["usage"] = usage_body(lease.choices)
    return chunk


class OpenAIServing:
    """Request handlers of the OpenAI API, bound to one engine once it has loaded."""

    def __init__(self, config: ServerConfig, metrics: ServerMetrics, secret: bytes,
                 keyring: KeyRing | None = None) -> None:
        self.config = config
        self.keyring = keyring
        self.metrics = metrics
        self.secret = secret
        self.limiter = ConcurrencyLimiter()
        # Re-read when the file changes, so a rotated key needs no restart.
        key_file = MetricsKeyFile(config.metrics_key_path) if config.metrics_key_path is not None else None
        self.metrics_access = MetricsAccess(key_file=key_file, tenants_authenticated=config.auth_enabled)
        self.engine: AsyncEngine | None = None
        self.model: LoadedModel | None = None
        self.created = int(time.time())

    def attach(self, engine: AsyncEngine, model: LoadedModel) -> None:
        """Called once the model has loaded; from now on requests are served."""
        self.model = model
        self.engine = engine

    # -- small endpoints -------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        if self.engine is None:
            return self.reject(APIError.unavailable("the model is still loading"), count=False)
        if self.engine.fault is not None:
            return self.reject(APIError.unavailable("the engine has failed", code="engine_failed"), count=False)
        return JSONResponse({"status": "ok"})

    def _model_card(self, model: LoadedModel, name: str) -> dict[str, Any]:
        """OpenAI's model object with vLLM's additions (``root``: the model served under this name,
        ``parent``: the base of an adapter, none here, ``max_model_len``, ``permission``)."""
        permission = {"id": f"modelperm-{name}", "object": "model_permission", "created": self.created,
                      "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                      "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                      "organization": "*", "group": None, "is_blocking": False}
        return {"id": name, "object": "model", "created": self.created, "owned_by": "kvfence",
                "root": model.name, "parent": None, "max_model_len": model.capacity.max_model_len,
                "permission": [permission]}

    async def list_models(self, request: Request) -> Response:
        model = self.model
        if model is None:
            return self.reject(APIError.unavailable("the model is still loading"))
        return JSONResponse({"object": "list", "data": [self._model_card(model, n) for n in model.served_names]})

    async def retrieve_model(self, request: Request) -> Response:
        model = self.model
        if model is None:
            return self.reject(APIError.unavailable("the model is still loading"))
        name = request.path_params["model_id"]
        if name not in model.served_names and name != model.name:
            return self.reject(APIError(404, f"the model {name!r} does not exist on this server",
                                        code="model_not_found", param="model", reason="model_not_found"))
        return JSONResponse(self._model_card(model, name))

    async def capacity(self, request: Request) -> Response:
        """What a gateway needs to cap lengths below the real KV capacity (I3)."""
        model = self.model
        if model is None:
            return self.reject(APIError.unavailable("the model is still loading"))
        cap = model.capacity
        return JSONResponse({
            "model": model.public_name,
            "max_model_len": cap.max_model_len,
            "pool_tokens": cap.pool_tokens,
            "num_pages": cap.num_pages,
            "page_size": cap.page_size,
            "cache_scope": self.config.cache_scope.value,
            "scrub": bool(cap.scrub),
            "random_weights": model.is_random_weights,
            # max_tokens 0 (echo + logprobs) computes the prompt only: a prompt of exactly
            # max_model_len tokens is scored, so a gateway may count such a call as 0 tokens, not 1
            "scores_max_tokens_0": bool(model.serves_prompt_only),
        })

    async def metrics_text(self, request: Request) -> Response:
        """Prometheus text; per-organisation series only for the metrics key (:mod:`.metrics_access`)."""
        view = self.metrics_access.view(request.scope)
        if isinstance(view, APIError):
            return self.reject(view)
        return Response(self.metrics.render(per_tenant=view is MetricsView.FULL),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    # -- generation ------------------------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        return await self._handle(request, "completions")

    async def chat_completions(self, request: Request) -> Response:
        return await self._handle(request, "chat")

    async def responses(self, request: Request) -> Response:
        """OpenAI's Responses API, served on the chat path (:mod:`.native_apis`)."""
        return await self._handle(request, "responses")

    async def messages(self, request: Request) -> Response:
        """Anthropic's Messages API, served on the chat path; errors in Anthropic's shape."""
        return anthropic_shaped(await self._handle(request, "messages"))

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's ``/v1/messages/count_tokens``: the prompt's tokens under the model's chat template."""
        return anthropic_shaped(await self._handle(request, "count_tokens"))

    def reject(self, exc: APIError, *, count: bool = True) -> Response:
        if count:
            self.metrics.rejections.labels(exc.reason).inc()
        if exc.status_code < 500:  # a client's mistake: one line, never a traceback
            log.info("refused: %d %s: %s", exc.status_code, exc.code or exc.type, one_line(exc.message))
        return exc.response()

    async def _handle(self, request: Request, endpoint: str) -> Response:
        try:
            return await self._generate(request, endpoint)
        except APIError as exc:
            return self.reject(exc)
        except RequestError as exc:
            return self.reject(from_request_error(exc))
        except QueueFullError as exc:
            return self.reject(APIError.too_many_requests(f"{exc}; retry later", code="queue_full"))
        except _AbortedByEngine as exc:
            log.error("request aborted by the engine: %s", exc)
            return self.reject(APIError(exc.status_code, str(exc), type=exc.type, code=exc.code))
        except EngineFault as exc:
            return self.reject(APIError.internal(str(exc)))
        except (ClientDisconnected, ClientDisconnect):
            self.metrics.rejections.labels("client_disconnected").inc()
            return Response(status_code=499)  # nobody is listening any more
        except Exception:
            log.exception("unexpected error while serving %s", request.url.path)
            return self.reject(APIError.internal())

    def _org_slot_limit(self, engine: AsyncEngine) -> int | None:
        """Request slots one organisation may hold: a share of all, once two or more organisations
        have keys (a single-organisation or --no-auth server keeps every slot for its one tenant)."""
        if engine.max_pending is None or self.keyring is None or self.keyring.num_organizations < 2:
            return None
        if self.config.max_org_share >= 1.0:
            return None
        return max(1, int(engine.max_pending * self.config.max_org_share))

    def ready(self) -> tuple[AsyncEngine, LoadedModel]:
        """The engine and model, or the 503 to answer while loading / after an engine failure."""
        engine, model = self.engine, self.model
        if engine is None or model is None:
            raise APIError.unavailable("the model is still loading; retry shortly")
        if engine.fault is not None:
            raise APIError.unavailable("the engine has failed; see the server log", code="engine_failed")
        return engine, model

    async def read_body(self, request: Request) -> bytes:
        """The request body, refused with a 413 beyond ``max_body_bytes`` (checked while reading),
        and with a 415 when it is declared as something other than JSON."""
        check_json_content_type(request.headers.get("content-type"))
        limit = self.config.max_body_bytes
        too_large = APIError(413, f"request body is larger than {limit} bytes", code="request_too_large")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    async def _generate(self, request: Request, endpoint: str) -> Response:
        tenant: Tenant = request.scope["state"]["tenant"]
        engine, model = self.ready()
        body = await self.read_body(request)
        adapter: ResponsesAdapter | MessagesAdapter | None = None
        if endpoint == "count_tokens":
            return self._count_tokens(decode_body(body), model)
        if endpoint in ("responses", "messages"):
            # translated to chat and validated as chat: every check below applies unchanged (I3, I5)
            adapter = (ResponsesAdapter if endpoint == "responses" else MessagesAdapter)(decode_body(body))
            req: GenerationRequest = adapter.chat
        else:
            req = parse_body(body, ChatCompletionRequest if endpoint == "chat" else CompletionRequest)
        is_chat = isinstance(req, ChatCompletionRequest)
        public_name = resolve_model_name(req.model, model)
        # I5: the scope comes from the authenticated tenant and the server secret; the client's
        # cache_salt is mixed in after the identity, so it can only narrow the scope.
        # With --cache-scope key the key's random id stands for the key, never its reusable name.
        scope_key = compute_scope_key(tenant.scope_identity, self.config.cache_scope, self.secret,
                                      cache_salt=req.cache_salt)

        def prepare() -> tuple[list[list[int]], list[SamplingParams]]:
            if isinstance(req, ChatCompletionRequest):
                prompts = [chat_prompt(req.template_messages(content_format(model)), req.wants_generation_prompt,
                                       model, add_special_tokens=req.add_special_tokens, **req.template_options())]
                param = "messages"
            else:
                assert isinstance(req, CompletionRequest)
                prompts = [tokenize_prompt(p, model, add_special_tokens=req.add_special_tokens) for p in req.prompts()]
                param = "prompt"
            params = [sampling_params(req, len(p), model, tenant.key, param, scope_key) for p in prompts]
            # I3 for n / best_of: all of a prompt's choices fit the pool at once, before anything is queued
            check_choices(prompts, params, model, shares_prefix=self.config.cache_scope is not CacheScope.REQUEST,
                          max_sequences=engine.max_pending)
            return prompts, params

        constraint = grammar_spec(req)
        # A model's first grammar builds its token trie (up to a second for a large vocabulary):
        # off the event loop, so other requests keep streaming meanwhile.
        prompts, params = await asyncio.to_thread(prepare) if constraint is not None else prepare()

        if self.config.cache_scope is not CacheScope.REQUEST:
            self.metrics.remember_scope(scope_key, tenant.identity.organization)

        limit = tenant.key.max_concurrent_requests if tenant.key is not None else None
        if not self.limiter.try_acquire(tenant.key_id, limit):
            raise APIError.too_many_requests(
                f"API key {tenant.identity.key_name!r} already has {limit} requests in flight (its limit); retry later",
                code="concurrency_limit_exceeded",
            )
        lease = _Lease(self, tenant, endpoint)
        prefix = "chatcmpl" if is_chat else "cmpl"  # a translated API keeps its own ids (adapter)
        response_id = f"{prefix}-{uuid.uuid4().hex}"
        # One engine request per choice; all under the call's scope key, so a prompt's choices
        # share its prompt pages (the engine prefills identical same-scope prompts once).
        requests = fan_out(response_id, prompts, params)
        lease.choices = [r.state for r in requests]
        lease.by_request = {r.request_id: r.state for r in requests}
        lease.params = params
        lease.echo = self._echo_texts(req, prompts, model)
        lease.prompts = prompts
        lease.prompt_logprobs = [None] * len(prompts)
        lease.tools = tool_calling(req) if isinstance(req, ChatCompletionRequest) else None
        for r in requests:
            r.state.logprob_text_offset = len(lease.echo[r.state.prompt_index])  # generated text follows the echo
            r.state.keeps_output = not req.scores_prompt_only
        try:
            lease.group = await engine.submit(
                [EngineRequest(r.request_id, r.prompt_token_ids, r.params) for r in requests], scope_key,
                owner=tenant.identity.organization, owner_limit=self._org_slot_limit(engine))
        except BaseException as exc:
            lease.choices = []
            lease.close()
            if constraint is not None and isinstance(exc, RequestError) and exc.param == "logits_processors":
                # the engine's refusal (disaggregated mode) names its own field; name the client's
                raise APIError.bad_request(f"{constraint[1]}: {exc.message}", param=constraint[1]) from exc
            if isinstance(exc, RequestError) and exc.param == "prompt_logprobs" and req.prompt_logprobs is None:
                raise APIError.bad_request(f"echo with logprobs: {exc.message}", param="echo") from exc  # what was sent
            raise
        created = int(time.time())
        if req.stream:
            lease.status = "disconnected"  # until the stream ends one way or the other
            if adapter is not None:
                payloads = self._chat_payloads(req, lease, response_id, created, public_name, model)
                return EventStreamResponse(adapter.stream(payloads, public_name), on_close=lease.close)
            chunks = (self._chat_chunks if is_chat else self._completion_chunks)(
                req, lease, response_id, created, public_name, model)
            return EventStreamResponse(chunks, on_close=lease.close)
        try:
            await run_until_disconnect(request.receive, lambda: self._collect(lease))
            body_json = (self._chat_body if is_chat else self._completion_body)(
                req, lease, response_id, created, public_name, model)
            if adapter is not None:
                body_json = adapter.whole(body_json)
            lease.status = "ok"
            return JSONResponse(body_json)
        except ClientDisconnected:
            lease.status = "disconnected"
            raise
        finally:
            lease.close()

    def _count_tokens(self, data: dict[str, Any], model: LoadedModel) -> Response:
        native = anthropic.CountTokensRequest.parse(data)
        req = validate_body({**anthropic.chat_request(native), "max_tokens": 1}, ChatCompletionRequest)
        resolve_model_name(req.model, model)
        ids = chat_prompt(req.template_messages(content_format(model)), req.wants_generation_prompt, model,
                          add_special_tokens=req.add_special_tokens, **req.template_options())
        return JSONResponse({"input_tokens": len(ids)})

    # -- request preparation ---------------------------------------------------------------------

    # -- answers ---------------------------------------------------------------------------------

    def _fold(self, lease: _Lease, out: RequestOutput) -> ChoiceState:
        choice = lease.by_request[out.request_id]
        choice.update(out)
        scores = out.prompt_logprobs
        if scores is not None and lease.prompt_logprobs[choice.prompt_index] is None:
            lease.prompt_logprobs[choice.prompt_index] = scores
        lease.saw_output(out)
        if out.finished and out.finish_reason == "abort" and out.error_reason == "rejected":
            raise _AbortedByEngine(f"the prefill side rejected the request ({out.error}); no answer is returned",
                                   rejected=True)
        if out.finished and out.finish_reason == "abort":
            raise _AbortedByEngine("the engine aborted the request (isolation check or internal limit); "
                                   "no answer is returned")
        return choice

    async def _collect(self, lease: _Lease) -> None:
        assert lease.group is not None
        async for out in lease.group:
            self._fold(lease, out)

    def _token_text(self, model: LoadedModel) -> Any:
        tok = model.tokenizer
        own_text = getattr(tok, "token_text", None)  # with the leading space a lone decode() drops
        return own_text if own_text is not None else lambda tid: tok.decode([tid], skip_special_tokens=False)

    def _token_bytes(self, model: LoadedModel) -> Any:
        """A token's own UTF-8 bytes (part of a character for byte tokens), where the tokenizer knows them."""
        return getattr(model.tokenizer, "token_bytes", None)

    @staticmethod
    def _echo_texts(req: GenerationRequest, prompts: list[list[int]], model: LoadedModel) -> list[str]:
        """``echo``: the text each prompt's choices start with. Completions: the prompt as sent (or its
        token ids decoded); chat: the last message's content, when the answer continues it (vLLM's
        chat echo, :meth:`ChatCompletionRequest.echo_text`). Empty strings without ``echo``."""
        if isinstance(req, ChatCompletionRequest):
            return [req.echo_text()] * len(prompts)
        if not isinstance(req, CompletionRequest) or not req.echo:
            return [""] * len(prompts)
        sent = req.prompts()
        return [p if isinstance(p, str) else model.tokenizer.decode(ids, skip_special_tokens=False)
                for p, ids in zip(sent, prompts, strict=True)]

    def _completion_body(self, req: Any, lease: _Lease, rid: str, created: int, name: str,
                         model: LoadedModel) -> dict[str, Any]:
        choices = []
        for c in returned_choices(lease.choices, lease.params):
            echo = lease.echo[c.prompt_index]
            logprobs = (completion_logprobs(c.token_ids, c.logprobs, req.logprobs, self._token_text(model), len(echo))
                        if req.logprobs is not None else None)
            if logprobs is not None and req.echo_logprobs is not None:
                logprobs = join_logprobs(self._echoed_logprobs(req, lease, c.prompt_index, model), logprobs)
            choice: dict[str, Any] = {"index": c.index, "text": echo + c.text, "logprobs": logprobs,
                                      "finish_reason": c.finish_reason}
            if req.prompt_logprobs is not None:
                choice["prompt_logprobs"] = self._prompt_logprobs(req, lease, c.prompt_index)
            choices.append(choice)
        return {"id": rid, "object": "text_completion", "created": created, "model": name,
                "choices": choices, "usage": usage_body(lease.choices)}

    @staticmethod
    def _prompt_logprobs(req: GenerationRequest, lease: _Lease, prompt_index: int) -> Any:
        """vLLM's ``prompt_logprobs`` of one prompt (null if its scores never came: the request failed)."""
        scores = lease.prompt_logprobs[prompt_index]
        if scores is None or req.prompt_logprobs is None:
            return None
        return prompt_logprobs_body(lease.prompts[prompt_index], scores, req.prompt_logprobs)

    def _echoed_logprobs(self, req: CompletionRequest, lease: _Lease, prompt_index: int,
                         model: LoadedModel) -> dict[str, Any]:
        """The legacy ``logprobs`` object of an echoed prompt, its offsets into the echoed text."""
        ids, scores, echo = lease.prompts[prompt_index], lease.prompt_logprobs[prompt_index], lease.echo[prompt_index]
        if scores is None:
            scores = [None] * len(ids)
        # A text prompt is echoed as sent (its BOS is not in it); token ids are echoed decoded with their specials.
        as_text = isinstance(req.prompts()[prompt_index], str)
        offsets = prompt_text_offsets(ids, model.tokenizer, skip_special_tokens=as_text, limit=len(echo))
        return echo_logprobs(ids, scores, req.echo_logprobs or 0, self._token_text(model), offsets)

    def _chat_body(self, req: Any, lease: _Lease, rid: str, created: int, name: str,
                   model: LoadedModel) -> dict[str, Any]:
        choices = []
        for c in returned_choices(lease.choices, lease.params):
            logprobs = (chat_logprobs(c.token_ids, c.logprobs, req.top_logprobs or 0, self._token_text(model),
                                      self._token_bytes(model))
                        if req.logprobs else None)
            message: dict[str, Any] = {"role": "assistant", "content": lease.echo[c.prompt_index] + c.text}
            finish_reason = c.finish_reason
            if lease.tools is not None:
                message, finish_reason = answer_message(lease.tools, c.text, finish_reason)
            choices.append({"index": c.index, "message": message, "logprobs": logprobs,
                            "finish_reason": finish_reason})
        body = {"id": rid, "object": "chat.completion", "created": created, "model": name,
                "choices": choices, "usage": usage_body(lease.choices)}
        if req.prompt_logprobs is not None:
            body["prompt_logprobs"] = self._prompt_logprobs(req, lease, 0)  # vLLM: one per response
        return body

    async def _completion_chunks(self, req: Any, lease: _Lease, rid: str, created: int, name: str,
                                 model: LoadedModel) -> AsyncIterator[bytes]:
        """Completions as a stream. A choice whose first chunk carries its prompt's scores (``echo``
        with ``logprobs``, ``prompt_logprobs``) opens once choice 0 of its prompt has computed
        them; output of its other choices that comes earlier waits for it."""
        assert lease.group is not None
        token_text = self._token_text(model)
        needs_scores = req.echo_logprobs is not None or req.prompt_logprobs is not None
        opened: set[int] = set()
        waiting: dict[int, list[Any]] = {}  # prompt index -> outputs held until its scores came
        try:
            if not needs_scores:
                for c in lease.choices:
                    if lease.echo[c.prompt_index]:
                        yield encode_event(completion_chunk(rid, created, name, c.index, lease.echo[c.prompt_index], None))
            async for out in lease.group:
                choice = self._fold(lease, out)
                ready = [out]
                if needs_scores:
                    if lease.prompt_logprobs[choice.prompt_index] is None:
                        waiting.setdefault(choice.prompt_index, []).append(out)
                        continue
                    ready = [*waiting.pop(choice.prompt_index, []), out]
                for o in ready:
                    c = lease.by_request[o.request_id]
                    if needs_scores and c.index not in opened:
                        opened.add(c.index)
                        yield encode_event(self._opening_chunk(req, lease, c, rid, created, name, model))
                    chunk = self._completion_delta(req, c, o, rid, created, name, token_text)
                    if chunk is not None:
                        yield encode_event(_with_running_usage(req, chunk, lease))
            if req.include_usage:
                yield _usage_chunk("text_completion", rid, created, name, lease)
            lease.status = "ok"
            yield encode_event(DONE)
        except Exception as exc:  # whatever failed, the client sees an error event, not a short success
            yield encode_event(_stream_failure(rid, lease, exc))

    def _opening_chunk(self, req: Any, lease: _Lease, c: ChoiceState, rid: str, created: int, name: str,
                       model: LoadedModel) -> dict[str, Any]:
        """A choice's first chunk when the prompt's scores are asked for: the echo and its logprobs."""
        logprobs = (self._echoed_logprobs(req, lease, c.prompt_index, model)
                    if req.echo_logprobs is not None else None)
        chunk = completion_chunk(rid, created, name, c.index, lease.echo[c.prompt_index], None, logprobs)
        if req.prompt_logprobs is not None:
            chunk["choices"][0]["prompt_logprobs"] = self._prompt_logprobs(req, lease, c.prompt_index)
        return chunk

    @staticmethod
    def _completion_delta(req: Any, c: ChoiceState, out: Any, rid: str, created: int, name: str,
                          token_text: Any) -> dict[str, Any] | None:
        """The chunk one engine output adds to a streamed choice (None when it adds nothing)."""
        finish = c.finish_reason if out.finished else None
        if not c.keeps_output:  # max_tokens 0: only the end of the choice is news
            return completion_chunk(rid, created, name, c.index, "", finish) if out.finished else None
        logprobs = None
        if req.logprobs is not None and out.new_token_ids:
            logprobs = completion_logprobs(list(out.new_token_ids), _new_logprobs(out),
                                           req.logprobs, token_text, c.logprob_text_offset)
            c.logprob_text_offset += sum(len(t) for t in logprobs["tokens"])
        if out.delta_text or out.finished or logprobs is not None:
            return completion_chunk(rid, created, name, c.index, out.delta_text, finish, logprobs)
        return None

    async def _chat_chunks(self, req: Any, lease: _Lease, rid: str, created: int, name: str,
                           model: LoadedModel) -> AsyncIterator[bytes]:
        async for payload in self._chat_payloads(req, lease, rid, created, name, model):
            yield encode_event(payload)

    async def _chat_payloads(self, req: Any, lease: _Lease, rid: str, created: int, name: str,
                             model: LoadedModel) -> AsyncIterator[dict[str, Any] | str]:
        """The chat stream's events, decoded: chunks, ``"[DONE]"``, or an ``{"error": ...}`` payload last."""
        assert lease.group is not None
        token_text, token_bytes = self._token_text(model), self._token_bytes(model)
        scores_sent = req.prompt_logprobs is None
        tool_streams = {c.index: ToolCallStream(lease.tools) for c in lease.choices} if lease.tools else {}
        try:
            for c in lease.choices:
                yield chat_chunk(rid, created, name, c.index, {"role": "assistant", "content": ""}, None)
                if lease.echo[c.prompt_index]:  # chat echo: the continued message first, as its own chunk
                    yield chat_chunk(rid, created, name, c.index, {"content": lease.echo[c.prompt_index]}, None)
            async for out in lease.group:
                choice = self._fold(lease, out)
                if not scores_sent and lease.prompt_logprobs[0] is not None:
                    # vLLM's prompt_logprobs are the response's: sent once, in a chunk of their own
                    scores_sent = True
                    first = chat_chunk(rid, created, name, choice.index, {}, None)
                    first["prompt_logprobs"] = self._prompt_logprobs(req, lease, 0)
                    yield first
                logprobs = None
                if choice.keeps_output and req.logprobs and out.new_token_ids:
                    logprobs = chat_logprobs(list(out.new_token_ids), _new_logprobs(out),
                                             req.top_logprobs or 0, token_text, token_bytes)
                delta: dict[str, Any] | None = {"content": out.delta_text}
                tool_stream = tool_streams.get(choice.index)
                if tool_stream is not None:
                    delta = tool_stream.delta(out.delta_text)
                if (delta is not None and out.delta_text and choice.keeps_output) or logprobs is not None:
                    chunk = chat_chunk(rid, created, name, choice.index, delta or {}, None, logprobs)
                    yield _with_running_usage(req, chunk, lease)
                if out.finished:
                    finish_reason = choice.finish_reason
                    if tool_stream is not None:
                        last, finish_reason = tool_stream.finish(finish_reason)
                        if last is not None:
                            yield _with_running_usage(req, chat_chunk(rid, created, name, choice.index, last, None), lease)
                    chunk = chat_chunk(rid, created, name, choice.index, {}, finish_reason)
                    yield _with_running_usage(req, chunk, lease)
            if req.include_usage:
                yield _usage_payload("chat.completion.chunk", rid, created, name, lease)
            lease.status = "ok"
            yield DONE
        except Exception as exc:  # whatever failed, the client sees an error event, not a short success
            yield _stream_failure(rid, lease, exc)
