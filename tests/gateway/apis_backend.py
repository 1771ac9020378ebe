"""A recording backend that speaks OpenAI Responses, Anthropic Messages, chat and embeddings natively.

Run as a real process on loopback (``python -m tests.gateway.apis_backend --port P``). Every answer
carries the caller's own last user text (``echo``), the previous request's (``leak``: another
tenant's prompt, as the incident's stale KV cache would give it) or the previous request's gateway
canaries (``leak_canary``) in *every* field with model text: Responses ``output_text``, a reasoning
summary and a ``function_call``'s arguments (``{"to": text}``); Messages ``thinking``, ``text`` and a
``tool_use`` input (``{"to": text}``); chat ``content``; with ``"only": FIELD`` (``text``,
``reasoning``, ``arguments``; ``thinking``, ``input``) only that field carries it. Streams come
``chunk`` characters at a time (``POST /_mode {"mode": ..., "chunk": k, "only": ...}``), so with
``chunk: 1`` a placeholder is cut at every offset. ``GET /_received`` returns what it was sent (path, body, headers).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _last_user(items: Any) -> str:
    if isinstance(items, str):
        return items
    for item in reversed(items or []):
        if isinstance(item, dict) and item.get("role") == "user":
            return _text_of(item.get("content"))
    return ""


def build() -> Starlette:
    state: dict[str, Any] = {"mode": "echo", "chunk": 5, "only": None, "previous": "", "previous_canaries": [],
                             "received": []}

    def field_text(name: str, text: str) -> str:
        """``text`` in the field ``name``, or a harmless line when the mode names another (``only``)."""
        return text if state["only"] in (None, name) else "Nothing to add here."

    def answer_text(request: Request, body: dict[str, Any], own: str) -> str:
        state["received"].append({"path": request.url.path, "body": body, "headers": dict(request.headers)})
        mode = state["mode"]
        text = own
        if mode == "leak":
            text = state["previous"]
        elif mode == "leak_canary":
            text = "The marker I see is " + " ".join(state["previous_canaries"]) + "."
        state["previous"] = own
        state["previous_canaries"] = re.findall(r"kvfc-[0-9a-f]{20}", json.dumps(body))
        return text

    def pieces(text: str) -> list[str]:
        k = max(1, int(state["chunk"]))
        return [text[i:i + k] for i in range(0, len(text), k)] or [""]

    def named(name: str, payload: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps(payload)}\n\n"

    # -- OpenAI Responses ---------------------------------------------------------------------------
    async def responses(request: Request) -> Response:
        body = await request.json()
        full = answer_text(request, body, _last_user(body.get("input")))
        text, summary = field_text("text", full), field_text("reasoning", full)
        arguments = json.dumps({"to": field_text("arguments", full)})
        rid = f"resp_{len(state['received'])}"
        usage = {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                 "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12}
        reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": summary}]}
        message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}
        call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "send", "arguments": arguments,
                "status": "completed"}
        response = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "completed",
                    "model": body.get("model"), "output": [reasoning, message, call], "parallel_tool_calls": True,
                    "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []), "error": None,
                    "incomplete_details": None, "instructions": body.get("instructions"), "metadata": {},
                    "temperature": None, "top_p": None, "text": body.get("text") or {"format": {"type": "text"}},
                    "usage": usage}
        if not body.get("stream"):
            return JSONResponse(response)

        async def events() -> AsyncIterator[str]:
            seq = iter(range(10_000))

            def ev(kind: str, **fields: Any) -> str:
                return named(kind, {"type": kind, **fields, "sequence_number": next(seq)})

            start = {**response, "status": "in_progress", "output": [], "usage": None}
            yield ev("response.created", response=start)
            yield ev("response.in_progress", response=start)
            yield ev("response.output_item.added", output_index=0, item={**reasoning, "summary": []})
            yield ev("response.reasoning_summary_part.added", item_id="rs_1", output_index=0, summary_index=0,
                     part={"type": "summary_text", "text": ""})
            for p in pieces(summary):
                yield ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=0,
                         delta=p)
            yield ev("response.reasoning_summary_text.done", item_id="rs_1", output_index=0, summary_index=0,
                     text=summary)
            yield ev("response.reasoning_summary_part.done", item_id="rs_1", output_index=0, summary_index=0,
                     part={"type": "summary_text", "text": summary})
            yield ev("response.output_item.done", output_index=0, item=reasoning)
            yield ev("response.output_item.added", output_index=1, item={**message, "status": "in_progress",
                                                                         "content": []})
            yield ev("response.content_part.added", item_id="msg_1", output_index=1, content_index=0,
                     part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})
            for p in pieces(text):
                yield ev("response.output_text.delta", item_id="msg_1", output_index=1, content_index=0, delta=p,
                         logprobs=[])
            yield ev("response.output_text.done", item_id="msg_1", output_index=1, content_index=0, text=text,
                     logprobs=[])
            yield ev("response.content_part.done", item_id="msg_1", output_index=1, content_index=0,
                     part=message["content"][0])
            yield ev("response.output_item.done", output_index=1, item=message)
            yield ev("response.output_item.added", output_index=2, item={**call, "arguments": "",
                                                                         "status": "in_progress"})
            for p in pieces(arguments):
                yield ev("response.function_call_arguments.delta", item_id="fc_1", output_index=2, delta=p)
            yield ev("response.function_call_arguments.done", item_id="fc_1", output_index=2, arguments=arguments,
                     name="send")
            yield ev("response.output_item.done", output_index=2, item=call)
            yield ev("response.completed", response=response)

        return StreamingResponse(events(), media_type="text/event-stream")

    # -- Anthropic Messages -------------------------------------------------------------------------
    async def messages(request: Request) -> Response:
        body = await request.json()
        full = answer_text(request, body, _last_user(body.get("messages")))
        thinking, text, tool = field_text("thinking", full), field_text("text", full), field_text("input", full)
        content = [{"type": "thinking", "thinking": thinking, "signature": "sig"}, {"type": "text", "text": text},
                   {"type": "tool_use", "id": "toolu_1", "name": "send", "input": {"to": tool}}]
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": content, "stop_reason": "tool_use", "stop_sequence": None,
                   "usage": {"input_tokens": 5, "output_tokens": 7}}
        if not body.get("stream"):
            return JSONResponse(message)

        async def events() -> AsyncIterator[str]:
            yield named("message_start", {"type": "message_start", "message": {
                **message, "content": [], "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 0}}})
            yield named("ping", {"type": "ping"})
            blocks = [({"type": "thinking", "thinking": "", "signature": ""}, "thinking_delta", "thinking", thinking),
                      ({"type": "text", "text": ""}, "text_delta", "text", text),
                      ({"type": "tool_use", "id": "toolu_1", "name": "send", "input": {}}, "input_json_delta",
                       "partial_json", json.dumps({"to": tool}))]
            for index, (start, delta_type, key, whole) in enumerate(blocks):
                yield named("content_block_start", {"type": "content_block_start", "index": index,
                                                    "content_block": start})
                for p in pieces(whole):
                    yield named("content_block_delta", {"type": "content_block_delta", "index": index,
                                                        "delta": {"type": delta_type, key: p}})
                if delta_type == "thinking_delta":
                    yield named("content_block_delta", {"type": "content_block_delta", "index": index,
                                                        "delta": {"type": "signature_delta", "signature": "sig"}})
                yield named("content_block_stop", {"type": "content_block_stop", "index": index})
            yield named("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                                              "stop_sequence": None},
                                          "usage": {"output_tokens": 7}})
            yield named("message_stop", {"type": "message_stop"})

        return StreamingResponse(events(), media_type="text/event-stream")

    # -- OpenAI chat (what a translated Messages request arrives as) --------------------------------
    async def chat(request: Request) -> Response:
        body = await request.json()
        text = answer_text(request, body, _last_user(body.get("messages")))
        base = {"id": "chatcmpl-1", "created": int(time.time()), "model": body.get("model")}
        usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
        if not body.get("stream"):
            return JSONResponse({**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})

        async def events() -> AsyncIterator[str]:
            head = {**base, "object": "chat.completion.chunk"}
            for p in pieces(text):
                chunk = {**head, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield f"data: {json.dumps({**head, 'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'stop'}]})}\n\n"
            if (body.get("stream_options") or {}).get("include_usage"):
                yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def embeddings(request: Request) -> Response:
        body = await request.json()
        state["received"].append({"path": request.url.path, "body": body, "headers": dict(request.headers)})
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return JSONResponse({"object": "list", "model": body.get("model"), "usage": {"prompt_tokens": 3,
                                                                                      "total_tokens": 3},
                             "data": [{"object": "embedding", "index": i, "embedding": [0.5, float(len(t))]}
                                      for i, t in enumerate(inputs)]})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "test"}]})

    async def set_mode(request: Request) -> Response:
        state.update(await request.json())
        return JSONResponse({"mode": state["mode"], "chunk": state["chunk"]})

    async def received(request: Request) -> Response:
        return JSONResponse(state["received"])

    async def forget(request: Request) -> Response:
        state["received"].clear()
        return JSONResponse({})

    return Starlette(routes=[
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/_mode", set_mode, methods=["POST"]),
        Route("/_received", received, methods=["GET"]),
        Route("/_received", forget, methods=["DELETE"]),
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
