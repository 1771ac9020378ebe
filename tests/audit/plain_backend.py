"""A plain OpenAI-compatible server that is not kvfence and says little about itself.

What an auditor meets at an unknown provider: model ids with slashes, ``/v1/models`` without any
context field, no ``usage`` in answers (or only part of it), no ``/v1/capacity``, no ``/metrics``,
no version endpoint, a generic ``Server`` header. It answers every prompt (no admission control,
no prefix cache) with a fixed-rate stream of words, so nothing about its isolation can be decided
from timing or from rejections it never makes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.audit.simbackend import serve_app

__all__ = ["PlainConfig", "run_plain_backend"]

WORDS = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do"]


@dataclass(frozen=True)
class PlainConfig:
    keys: tuple[str, ...] = ("key-a", "key-a2", "key-b")
    models: tuple[str, ...] = ("acme-ai/Chat-7B-v2", "acme-ai/Embed-1")
    usage: str = "none"  # none | partial (prompt_tokens missing) | full
    context_length: int | None = None  # advertised in /v1/models when set
    stream_error: str | None = None  # "openai" ({"error": ...}) or "object" (vLLM's older {"object": "error"})
    reasoning: bool = False  # refuses max_tokens and non-default temperatures, as OpenAI's o-series does
    ignores_stream: bool = False  # answers stream=true with one JSON body, as some proxies do


def _refuse(message: str) -> Response:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                   "code": "unsupported_parameter"}}, status_code=400)


def _app(config: PlainConfig) -> Starlette:
    def auth(request: Request) -> Response | None:
        header = request.headers.get("authorization", "")
        if header.removeprefix("Bearer ").strip() not in config.keys:
            return JSONResponse({"error": {"message": "bad key", "type": "auth", "code": 401}}, status_code=401)
        return None

    async def models(request: Request) -> Response:
        if (denied := auth(request)) is not None:
            return denied
        data = []
        for name in config.models:
            card: dict[str, Any] = {"id": name, "object": "model"}
            if config.context_length is not None:
                card["context_length"] = config.context_length
            data.append(card)
        return JSONResponse({"data": data})

    def usage(prompt_words: int, completion: int) -> dict[str, Any] | None:
        if config.usage == "none":
            return None
        if config.usage == "partial":
            return {"completion_tokens": completion}
        return {"prompt_tokens": prompt_words, "completion_tokens": completion,
                "total_tokens": prompt_words + completion}

    async def generate(request: Request) -> Response:
        if (denied := auth(request)) is not None:
            return denied
        body = await request.json()
        if config.reasoning and "max_tokens" in body:
            return _refuse("Unsupported parameter: 'max_tokens' is not supported with this model. "
                           "Use 'max_completion_tokens' instead.")
        if config.reasoning and body.get("temperature", 1) != 1:
            return _refuse("Unsupported value: 'temperature' does not support 0.0 with this model. "
                           "Only the default (1) value is supported.")
        chat = request.url.path.endswith("/chat/completions")
        prompt = (" ".join(str(m.get("content", "")) for m in body.get("messages", [])) if chat
                  else str(body.get("prompt", "")))
        n = max(1, min(int(body.get("max_tokens") or body.get("max_completion_tokens") or 8), 8))
        words = [WORDS[i % len(WORDS)] for i in range(n)]
        rid, created = f"x-{time.monotonic_ns()}", int(time.time())
        used = usage(len(prompt.split()), n)
        if not body.get("stream") or config.ignores_stream:
            choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": " ".join(words)},
                                       "finish_reason": "length"} if chat else
                                      {"index": 0, "text": " ".join(words), "finish_reason": "length"})
            out: dict[str, Any] = {"id": rid, "created": created, "model": body.get("model"), "choices": [choice]}
            if used is not None:
                out["usage"] = used
            return JSONResponse(out)

        async def events() -> AsyncIterator[bytes]:
            await asyncio.sleep(0.003)  # a constant "prefill": no cache, no length dependence
            for i, word in enumerate(words):
                piece = (" " if i else "") + word
                choice = ({"index": 0, "delta": {"content": piece}, "finish_reason": None} if chat
                          else {"index": 0, "text": piece, "finish_reason": None})
                yield f"data: {json.dumps({'id': rid, 'model': body.get('model'), 'choices': [choice]})}\n\n".encode()
                if config.stream_error is not None:  # fail after the first word, the way engines do
                    error = {"message": "engine failed", "type": "server_error", "code": 500}
                    event = {"error": error} if config.stream_error == "openai" else {"object": "error", **error}
                    yield f"data: {json.dumps(event)}\n\n".encode()
                    yield b"data: [DONE]\n\n"
                    return
            last = ({"index": 0, "delta": {}, "finish_reason": "length"} if chat
                    else {"index": 0, "text": "", "finish_reason": "length"})
            yield f"data: {json.dumps({'id': rid, 'choices': [last]})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[
        Route("/v1/models", models),
        Route("/v1/chat/completions", generate, methods=["POST"]),
        Route("/v1/completions", generate, methods=["POST"]),
    ])


@contextmanager
def run_plain_backend(config: PlainConfig | None = None) -> Iterator[str]:
    """Serve the plain backend on 127.0.0.1; yields its base URL."""
    with serve_app(_app(config or PlainConfig()), "the plain backend") as url:
        yield url
