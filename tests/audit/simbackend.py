"""OpenAI-compatible test backends on 127.0.0.1 with known, configurable isolation behaviour.

One starlette app, run by uvicorn in a thread, simulating what the audit must tell apart:

* a prefix cache (blocks of whitespace tokens) whose sharing scope is none, key, org or global,
  where a prefill costs ``per_token_s`` per uncached token before the first token is sent;
* admission that rejects (correct), truncates and answers 200, or leaks the previous tenant's
  prompt on over-length requests (the incident);
* self-description endpoints that look like a given engine (for the ``engine`` check).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.netutil import free_port

__all__ = ["SimConfig", "run_backend", "serve_app"]

_CHAT_OVERHEAD_TOKENS = 3


@dataclass
class SimConfig:
    keys: dict[str, str] = field(default_factory=lambda: {"key-a": "org-1", "key-a2": "org-1", "key-b": "org-2"})
    sharing: str = "org"  # none | key | org | global
    max_model_len: int = 4096
    kv_capacity: int | None = None
    per_token_s: float = 50e-6
    base_s: float = 0.002
    jitter_s: float = 0.0005
    block_size: int = 16
    over_length: str = "reject"  # reject | truncate | leak
    owned_by: str = "sim"
    version: str | None = None
    metrics: tuple[str, ...] = ()
    server_info: dict[str, Any] | None = None
    server_header: str | None = None


class _Sim:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.cache: dict[str, set[str]] = {}
        self.history: list[tuple[str, str]] = []  # (org, prompt), oldest first
        self.rng = random.Random(1234)
        self.lock = asyncio.Lock()

    def scope(self, key: str) -> str:
        sharing = self.config.sharing
        if sharing == "global":
            return "global"
        if sharing == "org":
            return self.config.keys[key]
        if sharing == "key":
            return key
        return f"request-{self.rng.random()}"

    def cached_tokens(self, scope: str, tokens: list[str]) -> int:
        blocks, parent, cached = self.cache.setdefault(scope, set()), "", 0
        size = self.config.block_size
        for start in range(0, len(tokens) - size + 1, size):
            parent = hashlib.sha256((parent + "\x00" + " ".join(tokens[start : start + size])).encode()).hexdigest()
            if parent in blocks:
                cached = start + size
            else:
                blocks.add(parent)
        return cached

    async def handle(self, request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        key = auth.removeprefix("Bearer ").strip()
        if key not in self.config.keys:
            return JSONResponse({"error": {"message": "invalid API key", "type": "invalid_request_error"}}, 401)
        body = await request.json()
        chat = request.url.path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        tokens = prompt.split()
        n_prompt = len(tokens) + (_CHAT_OVERHEAD_TOKENS if chat else 0)
        max_tokens = int(body.get("max_tokens") or 16)
        limit = self.config.max_model_len
        if self.config.kv_capacity is not None:
            limit = min(limit, self.config.kv_capacity) if self.config.over_length == "reject" else limit
        answer_words: list[str] | None = None
        if n_prompt + max_tokens > limit:
            mode = self.config.over_length
            if mode == "reject":
                return JSONResponse({"error": {"message": f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) "
                                               f"exceeds the maximum context of {limit} tokens",
                                               "type": "invalid_request_error", "code": "context_length_exceeded"}},
                                    400)
            keep = max(1, limit - max_tokens - (_CHAT_OVERHEAD_TOKENS if chat else 0))
            tokens = tokens[-keep:]
            n_prompt = len(tokens) + (_CHAT_OVERHEAD_TOKENS if chat else 0)
            if mode == "leak":
                others = [p for org, p in self.history if org != self.config.keys[key]]
                if others:
                    answer_words = others[-1].split()[:max_tokens]
        self.history.append((self.config.keys[key], prompt))
        async with self.lock:
            cached = self.cached_tokens(self.scope(key), tokens)
        delay = self.config.base_s + self.config.per_token_s * (len(tokens) - cached)
        delay += abs(self.rng.gauss(0, self.config.jitter_s))
        words = answer_words or [f"w{self.rng.randrange(1000)}" for _ in range(max_tokens)]
        usage = {"prompt_tokens": n_prompt, "completion_tokens": len(words),
                 "total_tokens": n_prompt + len(words)}
        model = body.get("model", "sim-model")
        if body.get("stream"):
            return StreamingResponse(self._stream(chat, model, words, delay, usage, body),
                                     media_type="text/event-stream")
        await asyncio.sleep(delay)
        text = " ".join(words)
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                                   "finish_reason": "length"} if chat else
                                  {"index": 0, "text": text, "finish_reason": "length"})
        return JSONResponse({"id": "x", "object": "chat.completion" if chat else "text_completion",
                             "model": model, "choices": [choice], "usage": usage})

    async def _stream(self, chat: bool, model: str, words: list[str], delay: float, usage: dict[str, int],
                      body: dict[str, Any]) -> AsyncIterator[str]:
        def event(data: dict[str, Any]) -> str:
            return f"data: {json.dumps(data)}\n\n"

        if chat:  # role chunk before prefill, as some servers do: must not count as the first token
            yield event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        await asyncio.sleep(delay)
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            last = i == len(words) - 1
            choice = ({"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece})
            choice["finish_reason"] = "length" if last else None
            yield event({"model": model, "choices": [choice]})
            await asyncio.sleep(0)
        if (body.get("stream_options") or {}).get("include_usage"):
            yield event({"model": model, "choices": [], "usage": usage})
        yield "data: [DONE]\n\n"


def build_app(config: SimConfig) -> Starlette:
    sim = _Sim(config)

    def headers() -> dict[str, str]:
        return {"server": config.server_header} if config.server_header else {}

    async def models(request: Request) -> Response:
        if request.headers.get("authorization", "").removeprefix("Bearer ").strip() not in config.keys:
            return JSONResponse({"error": {"message": "invalid API key"}}, 401)
        return JSONResponse({"object": "list", "data": [{"id": "sim-model", "object": "model",
                                                         "owned_by": config.owned_by,
                                                         "max_model_len": config.max_model_len}]},
                            headers=headers())

    async def version(request: Request) -> Response:
        if config.version is None:
            return JSONResponse({"error": "not found"}, 404, headers=headers())
        return JSONResponse({"version": config.version}, headers=headers())

    async def metrics(request: Request) -> Response:
        lines = [f"# TYPE {m} gauge\n{m} 1" for m in config.metrics]
        return PlainTextResponse("\n".join(lines) + "\n", headers=headers())

    async def server_info(request: Request) -> Response:
        if config.server_info is None:
            return JSONResponse({"error": "not found"}, 404)
        return JSONResponse(config.server_info)

    async def capacity(request: Request) -> Response:
        if config.kv_capacity is None:
            return JSONResponse({"error": "not found"}, 404)
        return JSONResponse({"kv_capacity_tokens": config.kv_capacity, "cache_scope": config.sharing})

    return Starlette(routes=[
        Route("/v1/models", models),
        Route("/version", version),
        Route("/metrics", metrics),
        Route("/get_server_info", server_info),
        Route("/v1/capacity", capacity),
        Route("/v1/chat/completions", sim.handle, methods=["POST"]),
        Route("/v1/completions", sim.handle, methods=["POST"]),
    ])


@contextmanager
def run_backend(config: SimConfig) -> Iterator[str]:
    """Serve a simulated backend on a free loopback port; yields its base URL."""
    with serve_app(build_app(config), "simulated backend") as url:
        yield url


@contextmanager
def serve_app(app: Starlette, what: str) -> Iterator[str]:
    """Serve any ASGI test app with uvicorn in a thread on a free loopback port; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                           lifespan="off", access_log=False, server_header=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
