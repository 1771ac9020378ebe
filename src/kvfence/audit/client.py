"""The one place the auditor talks HTTP: an OpenAI-compatible client that times the first token.

Time to first token (TTFT) is measured on the client from just before the request is sent to the
first streamed chunk that carries generated text or a finish reason. Role-only chunks that some
servers send before prefill are skipped, so the measurement covers prefill.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx

from kvfence.audit.errors import AuditCannotRun, EndpointRejected, EndpointUnreachable
from kvfence.audit.target import Api, AuditTarget, Tenant

__all__ = ["TRANSIENT_STATUSES", "EndpointClient", "Reply"]

# What a proxy or an overloaded server answers once and not again: worth a retry where no timing is measured.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(slots=True)
class Reply:
    """What one generation request got back."""

    status: int
    text: str = ""
    error: str | None = None
    body: str = ""
    ttft_s: float | None = None
    total_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, where reported
    finish_reason: str | None = None
    aborted_by_client: bool = False
    transport_error: str | None = None
    not_streamed: bool = False  # asked to stream, answered with one JSON body: no time to first token
    error_event: bool = False  # the error came as an event in a 200 stream (a late rejection), not as a status
    earlier: tuple[str, ...] = ()  # bodies of failed attempts before this one (retried): scanned too

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None and self.transport_error is None

    @property
    def scannable_text(self) -> str:
        """Everything the caller saw: the answer, and the error body (an error can leak too)."""
        return "\n".join(part for part in (*self.earlier, self.text, self.error or "", self.body) if part)


class EndpointClient:
    """An async client for one endpoint; use as ``async with EndpointClient(target) as client``."""

    def __init__(self, target: AuditTarget) -> None:
        self.target = target
        self.api: Api = target.api
        self.model: str | None = target.model
        self._listed: list[str] = []  # the model ids /v1/models gave, for error messages
        self._models_problem: str | None = None  # why /v1/models gave no list (not just an empty one)
        self._token_field = "max_tokens"  # or max_completion_tokens, for models that refuse max_tokens
        self._send_temperature = True  # False for models that take only their default temperature
        self._http = httpx.AsyncClient(
            base_url=target.base_url,
            timeout=httpx.Timeout(target.timeout_s, connect=min(10.0, target.timeout_s)),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
            headers={"User-Agent": "kvfence-audit", **target.extra_headers},
            follow_redirects=False,
        )

    async def __aenter__(self) -> EndpointClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._http.aclose()

    # --- discovery -------------------------------------------------------------------------------

    async def get(self, path: str, tenant: Tenant | None = None) -> httpx.Response | None:
        """GET ``path``; ``None`` when the endpoint cannot be reached for it (used for fingerprinting)."""
        try:
            return await self._http.get(path, headers=tenant.headers if tenant else {})
        except httpx.HTTPError:
            return None

    async def post(self, path: str, payload: dict[str, Any], tenant: Tenant | None = None) -> httpx.Response | None:
        """POST JSON to a discovery route (Ollama's ``/api/show``); ``None`` when it cannot be reached."""
        try:
            return await self._http.post(path, json=payload, headers=tenant.headers if tenant else {})
        except httpx.HTTPError:
            return None

    async def models(self) -> list[dict[str, Any]]:
        """The ``/v1/models`` entries, as the endpoint returns them."""
        try:
            response = await self._http.get("/v1/models", headers=self.target.tenant_a.headers)
        except httpx.HTTPError as exc:
            raise EndpointUnreachable(f"cannot reach {self.target.base_url}: {_describe(exc)}") from exc
        if response.status_code in (401, 403):
            raise EndpointRejected(
                f"{self.target.base_url}/v1/models rejected --key ({response.status_code}): "
                f"{_error_message(response.text) or response.reason_phrase}",
                status_code=response.status_code,
            )
        if response.status_code != 200:
            self._models_problem = f"answered HTTP {response.status_code}"
            return []
        try:
            data = response.json().get("data", [])
        except (ValueError, AttributeError):
            self._models_problem = "answered something that is not an OpenAI model list"
            return []
        return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []

    async def resolve_model(self) -> str:
        """The model to audit: ``--model``, else the first text-generation model the endpoint lists.

        Hosted APIs list embedding, speech and image models too, often first; their names give them
        away, and a text model is preferred. :meth:`resolve_api` then checks that it answers.
        """
        if self.model:
            return self.model
        models = await self.models()
        ids = [str(m["id"]) for m in models if m.get("id")]
        if not ids:
            problem = self._models_problem
            if problem:  # not an empty list: most likely not an OpenAI-compatible API at this URL
                raise AuditCannotRun(f"{self.target.base_url}/v1/models {problem}: is this an OpenAI-compatible "
                                     "endpoint (check --endpoint)? If it has no model list, pass --model NAME")
            raise AuditCannotRun(f"{self.target.base_url}/v1/models lists no model; pass --model NAME")
        self.model = next((i for i in ids if not _NOT_TEXT_MODEL.search(i)), ids[0])
        self._listed = ids
        return self.model

    async def resolve_api(self) -> Api:
        """Pick chat or completions: whichever answers a one-token request (``--api auto``)."""
        if self.api is not Api.AUTO:
            return self.api
        last: Reply | None = None
        for api in (Api.CHAT, Api.COMPLETIONS):
            reply = await self.generate(self.target.tenant_a, "Say hi.", max_tokens=1, api=api, transient_retries=2)
            self.raise_for_auth(reply, self.target.tenant_a)
            if reply.ok:
                self.api = api
                return api
            last = reply
        detail = (f"HTTP {last.status}: {last.error or last.transport_error or last.body[:200]}"
                  if last else "no answer")
        others = [i for i in self._listed if i != self.model][:8]
        hint = f"; pass --model NAME (the endpoint also lists: {', '.join(others)})" if others else ""
        raise AuditCannotRun(
            f"neither /v1/chat/completions nor /v1/completions answered a one-token request "
            f"for model {self.model!r}: {detail}{hint}"
        )

    def raise_for_auth(self, reply: Reply, tenant: Tenant) -> None:
        """A rejected key stops the audit: every later answer would be about auth, not isolation."""
        if reply.status in (401, 403):
            raise EndpointRejected(
                f"the endpoint rejected {tenant.option} ({reply.status}): {reply.error or 'no message'}",
                status_code=reply.status,
            )

    # --- generation ------------------------------------------------------------------------------

    async def generate(
        self,
        tenant: Tenant,
        prompt: str,
        *,
        max_tokens: int,
        stream: bool = False,
        abort_after_chunks: int | None = None,
        api: Api | None = None,
        transient_retries: int = 0,
    ) -> Reply:
        """Send one greedy generation request as ``tenant``; never raises for an HTTP error status.

        Models that refuse ``max_tokens`` (they want ``max_completion_tokens``) or any temperature
        but their default say so in a 400; the request is then adapted once and sent again, and
        every later request goes out in the accepted form. With ``transient_retries``, an answer a
        proxy or an overloaded server gives once (429, 500, 502, 503, 504) is retried after a short
        pause (for requests whose timing is not measured: calibration, discovery).
        """
        api = api or (self.api if self.api is not Api.AUTO else Api.CHAT)
        model = self.model or await self.resolve_model()
        earlier: list[str] = []
        for attempt in range(transient_retries + 1):
            for _ in range(3):
                reply = await self._send(tenant, api, model, prompt, max_tokens, stream, abort_after_chunks)
                if reply.status != 400 or not reply.error or not self._adapt(reply.error):
                    break
            reply.earlier = tuple(earlier)
            if reply.status not in TRANSIENT_STATUSES or attempt == transient_retries:
                return reply
            earlier.append(reply.body or reply.error or "")
            await asyncio.sleep(min(2.0, 0.25 * 2**attempt))
        return reply

    def _adapt(self, error: str) -> bool:
        """Learn from a 400 which request field the model refuses; True when there is a change to try."""
        if self._token_field == "max_tokens" and _REFUSES_MAX_TOKENS.search(error):
            self._token_field = "max_completion_tokens"
            return True
        if self._send_temperature and _REFUSES_TEMPERATURE.search(error):
            self._send_temperature = False
            return True
        return False

    async def _send(self, tenant: Tenant, api: Api, model: str, prompt: str, max_tokens: int, stream: bool,
                    abort_after_chunks: int | None) -> Reply:
        path, payload = _request(api, model, prompt, max_tokens, stream)
        if self._token_field != "max_tokens":
            payload[self._token_field] = payload.pop("max_tokens")
        if not self._send_temperature:
            payload.pop("temperature")
        headers = {**tenant.headers, "Content-Type": "application/json"}
        started = time.perf_counter()
        try:
            if stream:
                return await self._stream(path, payload, headers, started, abort_after_chunks)
            response = await self._http.post(path, json=payload, headers=headers)
        except httpx.ConnectError as exc:
            raise EndpointUnreachable(f"cannot reach {self.target.base_url}: {_describe(exc)}") from exc
        except httpx.HTTPError as exc:
            return Reply(status=0, transport_error=_describe(exc), total_s=time.perf_counter() - started)
        reply = Reply(status=response.status_code, body=response.text, total_s=time.perf_counter() - started)
        if response.status_code != 200:
            reply.error = _error_message(response.text) or response.reason_phrase or "no message"
            return reply
        try:
            data = response.json()
        except ValueError:
            reply.error = "200 answer is not JSON"
            return reply
        _absorb(reply, data)
        return reply

    async def _stream(
        self,
        path: str,
        payload: dict[str, Any],
        headers: dict[str, str],
        started: float,
        abort_after_chunks: int | None,
    ) -> Reply:
        async with self._http.stream("POST", path, json=payload, headers=headers) as response:
            reply = Reply(status=response.status_code)
            if response.status_code != 200:
                reply.body = (await response.aread()).decode("utf-8", "replace")
                reply.error = _error_message(reply.body) or response.reason_phrase or "no message"
                reply.total_s = time.perf_counter() - started
                return reply
            if "json" in response.headers.get("content-type", ""):
                # A server (or proxy) that ignores stream=true: keep the answer, but there is no first token to time.
                reply.body = (await response.aread()).decode("utf-8", "replace")
                reply.total_s = time.perf_counter() - started
                reply.not_streamed = True
                try:
                    _absorb(reply, json.loads(reply.body))
                except ValueError:
                    reply.error = "200 answer is not JSON"
                return reply
            chunks = 0
            try:
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data_text = line[len("data:"):].strip()
                    if data_text == "[DONE]":
                        break
                    try:
                        data = json.loads(data_text)
                    except ValueError:
                        reply.body += line + "\n"
                        continue
                    # OpenAI-style {"error": {...}}, or vLLM's older {"object": "error", "message": ...}.
                    if isinstance(data, dict) and ("error" in data or data.get("object") == "error"):
                        reply.error = _error_message(json.dumps(data)) or "error event in stream"
                        reply.error_event = True
                        reply.body += data_text + "\n"
                        continue
                    before = (reply.text, reply.finish_reason)
                    _absorb(reply, data)
                    if (reply.text, reply.finish_reason) == before:
                        continue  # role-only or usage-only chunk: no token yet
                    if reply.ttft_s is None:
                        reply.ttft_s = time.perf_counter() - started
                    chunks += 1
                    if abort_after_chunks is not None and chunks >= abort_after_chunks:
                        # Closing the stream drops the connection: the server sees a client disconnect.
                        reply.aborted_by_client = True
                        break
            except httpx.HTTPError as exc:
                reply.transport_error = _describe(exc)
            reply.total_s = time.perf_counter() - started
            return reply


# OpenAI's words when a (reasoning) model refuses a field: "Unsupported parameter: 'max_tokens' is
# not supported with this model. Use 'max_completion_tokens' instead." / "Unsupported value:
# 'temperature' does not support 0.0 with this model. Only the default (1) value is supported."
_REFUSES_MAX_TOKENS = re.compile(r"max_tokens'? is not supported|use '?max_completion_tokens", re.IGNORECASE)
_REFUSES_TEMPERATURE = re.compile(r"'?temperature'? (does not support|is not supported)|unsupported value: '?temperature",
                                  re.IGNORECASE)

# Model ids that are not text generators (embeddings, speech, images, moderation, reranking).
_NOT_TEXT_MODEL = re.compile(r"embed|whisper|tts|dall-e|moderation|rerank|transcribe|image|audio", re.IGNORECASE)


def _request(api: Api, model: str, prompt: str, max_tokens: int, stream: bool) -> tuple[str, dict[str, Any]]:
    payload: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream}
    if stream:
        payload["stream_options"] = {"include_usage": True}
    if api is Api.COMPLETIONS:
        payload["prompt"] = prompt
        return "/v1/completions", payload
    payload["messages"] = [{"role": "user", "content": prompt}]
    return "/v1/chat/completions", payload


def _absorb(reply: Reply, data: Any) -> None:
    """Fold one completion object or stream chunk into ``reply``."""
    if not isinstance(data, dict):
        return
    for choice in data.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        piece = choice.get("text")
        for holder in (choice.get("delta"), choice.get("message")):
            if isinstance(holder, dict) and isinstance(holder.get("content"), str):
                piece = holder["content"]
        if isinstance(piece, str):
            reply.text += piece
        if choice.get("finish_reason"):
            reply.finish_reason = str(choice["finish_reason"])
    usage = data.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("prompt_tokens"), int):
            reply.prompt_tokens = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            reply.completion_tokens = usage["completion_tokens"]
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            reply.cached_tokens = details["cached_tokens"]


_HTML_TITLE = re.compile(r"<(?:title|h1)[^>]*>(.*?)</(?:title|h1)>", re.IGNORECASE | re.DOTALL)


def _error_message(body: str) -> str | None:
    """The ``error.message`` of an OpenAI-style error body, or a short plain-text body."""
    try:
        data = json.loads(body)
    except ValueError:
        text = body.strip()
        if text[:1] == "<":  # an HTML error page (a proxy, a web server): its title, not its markup
            title = _HTML_TITLE.search(text)
            heading = re.sub(r"\s+", " ", title.group(1)).strip() if title else ""
            return f"an HTML page, not an API error ({heading[:200]})" if heading else "an HTML page, not an API error"
        return text[:500] if text else None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            message = error.get("message")
            return str(message) if message else json.dumps(error)[:500]
        if error:
            return str(error)[:500]
    return None


def _describe(exc: httpx.HTTPError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
