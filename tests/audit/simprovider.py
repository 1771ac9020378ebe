"""A simulated LLM provider with known defects, for the auditor's tests and benchmarks.

Written from the provider's side, not the auditor's: it knows nothing of canaries or probes. It
serves ``/v1/chat/completions`` and ``/v1/completions`` on 127.0.0.1 (uvicorn in a thread, or
``python -m tests.audit.simprovider`` as a separate process) with:

* ``mode``: ``honest`` (a prompt that does not fit gets a 400; a prompt that fits with
  ``max_tokens`` past the context is clamped or refused, ``boundary``), ``truncate`` (an over-long
  prompt is cut to the context and answered 200), ``leaking`` (as truncate, and every answer to
  another organisation carries a run of ``leak_words`` consecutive words of the latest prompt of
  someone else: the incident's stale state);
* ``cache_scope``: whose requests share prefix-cache blocks (``none`` / ``key`` / ``org`` /
  ``global``); an uncached prompt token costs ``per_token_s`` before the first token;
* ``eviction``: the prefix cache holds ``cache_tokens`` tokens, in one LRU shared by every scope
  (``shared``) or one budget per scope (``scoped``);
* ``discovery``: where the context and KV capacity are published, in the style of an engine
  (``openai``: ``max_model_len``; ``llamacpp``: ``meta.n_ctx`` and ``/props``; ``tgi``: ``/info``;
  ``sglang``: ``/get_server_info``; ``ollama``: ``/api/ps`` and ``/api/show``; ``vllm``: the
  ``vllm:cache_config_info`` metric; ``kvfence``: ``/v1/capacity``; ``none``).

Tokens are whitespace-separated words; a chat request costs 3 tokens more than its text.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.audit.simbackend import serve_app

__all__ = ["ProviderConfig", "build_provider", "run_provider"]

_CHAT_TOKENS = 3
_MODEL = "sim-provider"


@dataclass
class ProviderConfig:
    keys: dict[str, str] = field(default_factory=lambda: {"key-a": "org-1", "key-a2": "org-1", "key-b": "org-2"})
    mode: str = "honest"  # honest | truncate | leaking
    boundary: str = "clamp"  # clamp | reject: prompt fits, prompt + max_tokens does not
    leak_words: int = 40
    cache_scope: str = "org"  # none | key | org | global
    eviction: str = "scoped"  # scoped | shared
    cache_tokens: int | None = None  # None: unbounded
    context: int = 4096
    kv_capacity: int | None = None
    discovery: str = "openai"
    report_cached_tokens: bool = True
    per_token_s: float = 40e-6
    base_s: float = 0.002
    jitter_s: float = 0.0004
    block: int = 16
    seed: int = 0


class _PrefixCache:
    """Blocks of ``block`` tokens chained by hash, with an LRU per eviction domain."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.domains: dict[str, OrderedDict[str, None]] = {}

    def lookup_and_insert(self, scope: str | None, tokens: list[str]) -> int:
        if scope is None:
            return 0
        domain_name = "all" if self.config.eviction == "shared" else scope
        domain = self.domains.setdefault(domain_name, OrderedDict())
        size, parent, cached, missed = self.config.block, scope, 0, False
        for start in range(0, len(tokens) - size + 1, size):
            parent = hashlib.sha256(f"{parent}\x00{' '.join(tokens[start:start + size])}".encode()).hexdigest()
            if not missed and parent in domain:
                domain.move_to_end(parent)
                cached = start + size
            else:
                missed = True
                domain[parent] = None
        if self.config.cache_tokens is not None:
            while len(domain) * size > self.config.cache_tokens:
                domain.popitem(last=False)
        return cached


class _Provider:
    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.cache = _PrefixCache(config)
        self.rng = random.Random(config.seed)
        self.latest: dict[str, list[str]] = {}  # org -> words of its latest prompt
        self.lock = asyncio.Lock()

    def scope(self, key: str) -> str | None:
        return {"none": None, "key": key, "org": self.config.keys[key], "global": "global"}[self.config.cache_scope]

    def reject(self, message: str) -> Response:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                       "code": "context_length_exceeded"}}, 400)

    async def generate(self, request: Request) -> Response:
        key = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if key not in self.config.keys:
            return JSONResponse({"error": {"message": "invalid API key", "type": "authentication_error"}}, 401)
        org = self.config.keys[key]
        body = await request.json()
        chat = request.url.path.endswith("/chat/completions")
        text = body["messages"][-1]["content"] if chat else body["prompt"]
        words = text.split()
        overhead = _CHAT_TOKENS if chat else 0
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        context = self.config.context
        room = context
        if self.config.kv_capacity is not None:
            room = min(room, self.config.kv_capacity)
        n_prompt = len(words) + overhead
        if n_prompt > room:
            if self.config.mode == "honest":
                return self.reject(f"this model's maximum context is {room} tokens; the prompt has {n_prompt}")
            words = words[-max(1, room - overhead - 1):]
            n_prompt = len(words) + overhead
        n_answer = max_tokens
        if n_prompt + max_tokens > room:
            if self.config.mode == "honest" and self.config.boundary == "reject":
                return self.reject(f"prompt ({n_prompt}) + max_tokens ({max_tokens}) exceeds {room} tokens")
            n_answer = max(1, room - n_prompt)
        others = [w for o, w in self.latest.items() if o != org]
        self.latest[org] = words
        async with self.lock:
            cached = self.cache.lookup_and_insert(self.scope(key), words)
        delay = self.config.base_s + self.config.per_token_s * (len(words) - cached)
        delay += abs(self.rng.gauss(0, self.config.jitter_s))
        answer = [f"w{self.rng.randrange(1000)}" for _ in range(n_answer)]
        if self.config.mode == "leaking" and others:
            stale = others[-1]
            start = self.rng.randrange(max(1, len(stale) - self.config.leak_words + 1))
            run = stale[start:start + self.config.leak_words]
            answer = (answer[:2] + run + answer[2:])[:max(n_answer, len(run) + 2)]
        usage: dict[str, Any] = {"prompt_tokens": n_prompt, "completion_tokens": len(answer),
                                 "total_tokens": n_prompt + len(answer)}
        if self.config.report_cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        finish = "length"
        if body.get("stream"):
            return StreamingResponse(self._stream(chat, answer, delay, usage, finish, body),
                                     media_type="text/event-stream")
        await asyncio.sleep(delay)
        content = " ".join(answer)
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": content},
                                   "finish_reason": finish} if chat else
                                  {"index": 0, "text": content, "finish_reason": finish})
        return JSONResponse({"id": "sim", "object": "chat.completion" if chat else "text_completion",
                             "model": _MODEL, "choices": [choice], "usage": usage})

    async def _stream(self, chat: bool, answer: list[str], delay: float, usage: dict[str, Any], finish: str,
                      body: dict[str, Any]) -> AsyncIterator[str]:
        def event(data: dict[str, Any]) -> str:
            return f"data: {json.dumps(data)}\n\n"

        if chat:
            yield event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        await asyncio.sleep(delay)
        for i, word in enumerate(answer):
            piece = word if i == 0 else " " + word
            choice: dict[str, Any] = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            choice["finish_reason"] = finish if i == len(answer) - 1 else None
            yield event({"model": _MODEL, "choices": [choice]})
        if (body.get("stream_options") or {}).get("include_usage"):
            yield event({"model": _MODEL, "choices": [], "usage": usage})
        yield "data: [DONE]\n\n"


def build_provider(config: ProviderConfig) -> Starlette:
    provider = _Provider(config)
    style = config.discovery

    def authorised(request: Request) -> bool:
        return request.headers.get("authorization", "").removeprefix("Bearer ").strip() in config.keys

    async def models(request: Request) -> Response:
        if not authorised(request):
            return JSONResponse({"error": {"message": "invalid API key"}}, 401)
        entry: dict[str, Any] = {"id": _MODEL, "object": "model", "owned_by": "sim"}
        if style in ("openai", "vllm", "kvfence"):
            entry["max_model_len"] = config.context
        elif style == "llamacpp":
            entry["owned_by"] = "llamacpp"
            entry["meta"] = {"n_ctx": config.context, "n_ctx_train": 131072, "n_vocab": 32000}
        elif style == "ollama":
            entry["owned_by"] = "library"
        return JSONResponse({"object": "list", "data": [entry]})

    def only(wanted: str, payload: dict[str, Any]) -> Response:
        if style != wanted:
            return JSONResponse({"error": "not found"}, 404)
        return JSONResponse(payload)

    async def props(request: Request) -> Response:
        return only("llamacpp", {"default_generation_settings": {"n_ctx": config.context}, "total_slots": 1})

    async def info(request: Request) -> Response:
        return only("tgi", {"model_id": _MODEL, "max_input_tokens": config.context - 1,
                            "max_total_tokens": config.context,
                            "max_batch_total_tokens": config.kv_capacity or config.context})

    async def server_info(request: Request) -> Response:
        return only("sglang", {"context_length": config.context,
                               "internal_states": [{"max_total_num_tokens": config.kv_capacity or config.context}]})

    async def ollama_ps(request: Request) -> Response:
        return only("ollama", {"models": [{"name": _MODEL, "model": _MODEL, "context_length": config.context}]})

    async def ollama_show(request: Request) -> Response:
        return only("ollama", {"parameters": f"num_ctx {config.context}",
                               "model_info": {"llama.context_length": 131072}})

    async def capacity(request: Request) -> Response:
        if style != "kvfence" or config.kv_capacity is None:
            return JSONResponse({"error": "not found"}, 404)
        return JSONResponse({"kv_capacity_tokens": config.kv_capacity})

    async def metrics(request: Request) -> Response:
        if style != "vllm" or config.kv_capacity is None:
            return PlainTextResponse("# nothing\n")
        blocks = config.kv_capacity // config.block
        return PlainTextResponse(f'vllm:cache_config_info{{block_size="{config.block}",num_gpu_blocks="{blocks}"}} 1.0\n')

    return Starlette(routes=[
        Route("/v1/models", models),
        Route("/props", props),
        Route("/info", info),
        Route("/get_server_info", server_info),
        Route("/api/ps", ollama_ps),
        Route("/api/show", ollama_show, methods=["POST"]),
        Route("/v1/capacity", capacity),
        Route("/metrics", metrics),
        Route("/v1/chat/completions", provider.generate, methods=["POST"]),
        Route("/v1/completions", provider.generate, methods=["POST"]),
    ])


@contextmanager
def run_provider(config: ProviderConfig) -> Iterator[str]:
    """Serve the simulated provider on a free loopback port in a thread; yields its base URL."""
    with serve_app(build_provider(config), "simulated provider") as url:
        yield url


def main() -> None:  # a separate process, for the benchmarks
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config", default="{}", help="ProviderConfig fields as JSON")
    args = parser.parse_args()
    config = ProviderConfig(**json.loads(args.config))
    uvicorn.run(build_provider(config), host="127.0.0.1", port=args.port, log_level="error", access_log=False)


if __name__ == "__main__":
    main()
