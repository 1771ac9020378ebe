"""A minimal OpenAI-compatible backend for gateway tests, run as a real process on loopback.

It records every request it receives (body and headers) and answers with a configurable reply,
streamed in small chunks or whole. Test-only controls:

- ``GET /_received`` -> the recorded requests; ``DELETE /_received`` clears them;
- ``POST /_control`` with ``{"status": 503}`` (fail every request), ``{"reply": "..."}``,
  ``{"chunk_chars": 3}``, ``{"echo": true}`` (reply with the last user message),
  ``{"break_after": 2}`` (drop the connection after that many stream chunks),
  ``{"ignore_stream": true}`` (answer whole JSON even when asked to stream),
  ``{"usage": false}`` (never report usage, as some backends do), ``{"delay_s": 2}`` (wait before
  answering; a client that leaves meanwhile is recorded as ``client_disconnected`` on its request).

Streamed answers end with a usage chunk (no choices) when the request asks for
``stream_options.include_usage``. Usage is 5 prompt tokens and 7 completion tokens per answer.

Run: ``python -m tests.gateway.fake_backend --port P --name NAME [--max-model-len N]
[--vllm-blocks N --block-size B]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


def build(name: str, max_model_len: int | None, vllm_blocks: int | None, block_size: int) -> Starlette:
    received: list[dict[str, Any]] = []
    control: dict[str, Any] = {"status": 200, "reply": f"hello from {name}", "chunk_chars": 4, "echo": False,
                               "delay_s": 0.0, "break_after": None, "usage": True}

    def reply_text(body: dict[str, Any], endpoint: str) -> str:
        if endpoint == "chat":
            users = [m for m in body.get("messages", []) if m.get("role") == "user"]
            content = users[-1]["content"] if users else ""
            last = content if isinstance(content, str) else json.dumps(content)
        else:
            last = str(body.get("prompt", ""))
        # "echo:" at the start of the prompt (or the echo control) makes the backend repeat it.
        if control["echo"] or last.startswith("echo:"):
            return last
        return str(control["reply"])

    async def generate(request: Request, endpoint: str) -> Response:
        body = await request.json()
        entry: dict[str, Any] = {"endpoint": endpoint, "body": body, "headers": dict(request.headers)}
        received.append(entry)
        if control["status"] != 200:
            return JSONResponse({"error": {"message": f"{name} is failing on purpose", "type": "server_error",
                                           "code": None, "param": None}}, status_code=int(control["status"]))
        if control["delay_s"]:
            deadline = time.monotonic() + float(control["delay_s"])
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    entry["client_disconnected"] = True
                    return Response(status_code=499)
                await asyncio.sleep(0.02)
        text = reply_text(body, endpoint)
        n = int(body.get("n") or 1)
        created = int(time.time())
        rid = f"cmpl-{name}-{len(received)}"
        obj = "chat.completion" if endpoint == "chat" else "text_completion"
        usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
        if not body.get("stream") or control.get("ignore_stream"):
            if endpoint == "chat":
                choices = [{"index": i, "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop"} for i in range(n)]
            else:
                choices = [{"index": i, "text": text, "finish_reason": "stop"} for i in range(n)]
            whole: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": body.get("model"),
                                     "choices": choices}
            if control["usage"]:
                whole["usage"] = usage
            return JSONResponse(whole)

        step = max(1, int(control["chunk_chars"]))
        pieces = [text[i:i + step] for i in range(0, len(text), step)] or [""]

        async def events():  # type: ignore[no-untyped-def]
            chunk_obj = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
            base = {"id": rid, "object": chunk_obj, "created": created, "model": body.get("model")}
            if endpoint == "chat":
                for i in range(n):
                    first = {**base, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                                  "finish_reason": None}]}
                    yield f"data: {json.dumps(first)}\n\n"
            for count, piece in enumerate(pieces):
                if control.get("break_after") is not None and count >= int(control["break_after"]):
                    raise RuntimeError("connection dropped on purpose")  # uvicorn aborts the response
                for i in range(n):
                    choice: dict[str, Any] = ({"index": i, "delta": {"content": piece}, "finish_reason": None}
                                              if endpoint == "chat" else
                                              {"index": i, "text": piece, "finish_reason": None})
                    yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
                await asyncio.sleep(0)
            for i in range(n):
                last: dict[str, Any] = ({"index": i, "delta": {}, "finish_reason": "stop"} if endpoint == "chat"
                                        else {"index": i, "text": "", "finish_reason": "stop"})
                yield f"data: {json.dumps({**base, 'choices': [last]})}\n\n"
            options = body.get("stream_options") or {}
            if options.get("include_usage") and control["usage"]:
                yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def chat(request: Request) -> Response:
        return await generate(request, "chat")

    async def completions(request: Request) -> Response:
        return await generate(request, "completions")

    async def models(request: Request) -> Response:
        entry: dict[str, Any] = {"id": "test-model", "object": "model", "owned_by": name}
        if max_model_len is not None:
            entry["max_model_len"] = max_model_len
        return JSONResponse({"object": "list", "data": [entry]})

    async def metrics(request: Request) -> Response:
        if vllm_blocks is None:
            return PlainTextResponse("# no vllm metrics\n")
        return PlainTextResponse(
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{block_size}",cache_dtype="auto",gpu_memory_utilization="0.9",'
            f'num_cpu_blocks="0",num_gpu_blocks="{vllm_blocks}"}} 1.0\n')

    async def get_received(request: Request) -> Response:
        if request.method == "DELETE":
            received.clear()
            return JSONResponse({"cleared": True})
        return JSONResponse(received)

    async def set_control(request: Request) -> Response:
        control.update(await request.json())
        return JSONResponse(control)

    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/_received", get_received, methods=["GET", "DELETE"]),
        Route("/_control", set_control, methods=["POST"]),
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="fake")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--vllm-blocks", type=int, default=None)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()
    app = build(args.name, args.max_model_len, args.vllm_blocks, args.block_size)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
