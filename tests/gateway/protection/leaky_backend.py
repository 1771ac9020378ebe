"""A chat backend that can be made to answer over the previous request's prompt (the incident's bug).

``POST /_mode {"mode": "benign" | "echo" | "leak" | "leak_disguised"}``:

- ``benign``: a generic answer that quotes a few words of the caller's own last message;
- ``echo``: the caller's own last message, verbatim (placeholders included);
- ``leak``: the last user message of the *previous* request it served, whoever sent it;
- ``leak_canary``: the gateway canaries (``kvfc-...``) of the previous request, whoever sent it, in a
  short sentence (a model that read another tenant's system prompt out of a stale KV cache);
- ``tools``: no text but two tool calls per choice (``n`` choices) whose arguments hold the caller's
  own last message, ``{"to": message, "body": "Hello " + message}``: the first as ``json.dumps`` writes
  it, the second with ``<`` and ``>`` escaped as ``\\u003c`` / ``\\u003e`` (as Go's encoder and many
  models write them). Streamed, the arguments come 3 characters at a time, calls and choices
  interleaved;
- ``custom``: like ``tools``, but two *custom* tool calls (``{"type": "custom", "custom": {"name",
  "input"}}``, free text) whose inputs are ``message`` and ``"Hello " + message``;
- ``leak_custom``: one custom tool call whose input is the *previous* request's last user message
  (``leak``, hidden in a tool call);
- ``json``: the content is a JSON document, ``{"to": message, "body": "Hello " + message}`` (as a
  backend under ``response_format: json_object`` writes it).

Issue 16's leak channels (each leaks the *previous* request's last user message, ``previous``):

- ``leak_history``: the last *assistant* message of the previous request (text the model wrote earlier
  that a tenant resent as its conversation history);
- ``fixed``: the text given with ``{"mode": "fixed", "text": ...}``, whoever asks (a phrase the
  model writes for everyone, e.g. a refusal);
- ``leak_top_logprobs``: a harmless content whose ``top_logprobs`` alternatives (rank 1) spell ``previous``;
- ``leak_tool_name``: a tool call whose ``function.name`` is ``previous``;
- ``leak_message_name``: a harmless content, ``message.name`` is ``previous``;
- ``leak_unknown_field``: a harmless content, ``message.x_debug`` and a top-level ``x_trace`` are ``previous``;
- ``leak_lookalike``: ``previous`` with Cyrillic look-alike letters for a, e, o, c, p;
- ``leak_canary_disguised``: the previous canaries in lower case with spaces between the characters;
- ``leak_transform``: ``previous`` rewritten by ``{"transform": ...}``: ``rot13``, ``reversed`` (the
  whole text spelt backwards), ``words_reversed`` (each word spelt backwards), ``leet`` (a, e, i, o,
  s, t as 4, 3, 1, 0, 5, 7), ``spaced`` (a space between letters, three between words), ``base64``
  and ``hex`` (after a few plain words).

Answers stream in 5-character chunks when asked to. With ``logprobs: true`` the answer comes as
3-character "tokens" with chat ``logprobs`` (two tokens per streamed chunk), so a placeholder is split
across tokens and chunks. ``GET /_received`` returns what it was sent.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def _transform(name: str, text: str) -> str:
    if name == "rot13":
        import codecs
        return codecs.encode(text, "rot13")
    if name == "reversed":
        return text[::-1]
    if name == "words_reversed":
        return " ".join(w[::-1] for w in text.split())
    if name == "leet":
        return text.translate(str.maketrans("aeiostAEIOST", "431057431057"))
    if name == "spaced":
        return "   ".join(" ".join(w) for w in text.split())
    if name == "base64":
        import base64
        return "Encoded as asked: " + base64.b64encode(text.encode()).decode()
    if name == "hex":
        return "In hex: " + text.encode().hex()
    raise ValueError(f"unknown transform {name!r}")


def build() -> Starlette:
    state: dict[str, Any] = {"mode": "benign", "previous": "", "previous_canaries": [],
                             "previous_assistant": "", "text": "", "received": []}

    def last_assistant(body: dict[str, Any]) -> str:
        for message in reversed(body.get("messages") or []):
            if message.get("role") == "assistant" and isinstance(message.get("content"), str):
                return str(message["content"])
        return ""

    def last_user(body: dict[str, Any]) -> str:
        for message in reversed(body.get("messages") or []):
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                return str(message["content"])
        return ""

    async def chat(request: Request) -> Response:
        body = await request.json()
        state["received"].append(body)
        own = last_user(body)
        if state["mode"] == "leak_canary":
            text = "The marker I see is " + " ".join(state["previous_canaries"]) + "."
        elif state["mode"] == "leak":
            text = state["previous"]
        elif state["mode"] == "leak_disguised":  # the same leak, in capitals, spread out, zero-width inside words
            text = "  ".join(w[:2] + "\u200b" + w[2:] for w in state["previous"].upper().split())
        elif state["mode"] == "echo":
            text = own
        elif state["mode"] == "leak_history":
            text = state["previous_assistant"]
        elif state["mode"] == "fixed":
            text = state["text"]
        elif state["mode"] == "leak_lookalike":
            text = state["previous"].translate(str.maketrans("aeocp", "\u0430\u0435\u043e\u0441\u0440"))
        elif state["mode"] == "leak_transform":
            text = _transform(state["transform"], state["previous"])
        elif state["mode"] == "leak_canary_disguised":
            text = "The marker: " + " ".join(" ".join(c.lower()) for c in state["previous_canaries"]) + "."
        elif state["mode"] in ("leak_top_logprobs", "leak_message_name", "leak_unknown_field"):
            text = "All good here, nothing to report."
        elif state["mode"] == "json":
            text = json.dumps({"to": own, "body": f"Hello {own}"})
        else:
            text = f"Thanks for your message. You wrote: {' '.join(own.split()[:5])}. Here is a short answer."
        previous, state["previous"] = state["previous"], own
        state["previous_assistant"] = last_assistant(body)
        state["previous_canaries"] = re.findall(r"kvfc-[0-9a-f]{20}", json.dumps(body.get("messages")))
        base = {"id": f"chatcmpl-{len(state['received'])}", "created": int(time.time()), "model": body.get("model")}
        if state["mode"] == "tools":
            return tool_calls(body, base, own)
        if state["mode"] == "custom":
            return tool_calls(body, base, own, custom=[own, f"Hello {own}"])
        if state["mode"] == "leak_custom":
            return tool_calls(body, base, own, custom=[previous])
        if state["mode"] == "leak_tool_name":
            return JSONResponse({**base, "object": "chat.completion", "choices": [
                {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": previous, "arguments": "{}"}}]}}]})
        if state["mode"] in ("leak_message_name", "leak_unknown_field") and not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            extra: dict[str, Any] = {}
            if state["mode"] == "leak_message_name":
                message["name"] = previous
            else:
                message["x_debug"] = previous
                extra["x_trace"] = {"prompt": previous}
            return JSONResponse({**base, **extra, "object": "chat.completion", "choices": [
                {"index": 0, "message": message, "finish_reason": "stop"}]})
        if state["mode"] == "leak_top_logprobs":
            body = {**body, "logprobs": True}
            text = "x" * (len(previous) // 3 + 1) * 3
        with_logprobs = body.get("logprobs") is True
        tokens = [text[i:i + 3] for i in range(0, len(text), 3)]

        alternatives = [previous[i:i + 3] for i in range(0, len(previous), 3)] \
            if state["mode"] == "leak_top_logprobs" else None
        position = iter(range(10**9))

        def entry(token: str) -> dict[str, Any]:
            raw = list(token.encode())
            at = next(position)
            second = token[:1] if alternatives is None else (alternatives[at] if at < len(alternatives) else "")
            return {"token": token, "logprob": -0.25, "bytes": raw,
                    "top_logprobs": [{"token": token, "logprob": -0.25, "bytes": raw},
                                     {"token": second, "logprob": -3.0, "bytes": list(second.encode())}]}

        if not body.get("stream"):
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": "stop"}
            if with_logprobs:
                choice["logprobs"] = {"content": [entry(t) for t in tokens], "refusal": None}
            return JSONResponse({**base, "object": "chat.completion", "choices": [choice],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        async def events():  # type: ignore[no-untyped-def]
            head = {**base, "object": "chat.completion.chunk"}
            yield f"data: {json.dumps({**head, 'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': ''}, 'finish_reason': None}]})}\n\n"
            if with_logprobs:
                for i in range(0, len(tokens), 2):
                    pair = tokens[i:i + 2]
                    chunk = {**head, "choices": [{"index": 0, "delta": {"content": "".join(pair)},
                                                  "logprobs": {"content": [entry(t) for t in pair]},
                                                  "finish_reason": None}]}
                    yield f"data: {json.dumps(chunk)}\n\n"
            for i in range(0, 0 if with_logprobs else len(text), 5):
                chunk = {**head, "choices": [{"index": 0, "delta": {"content": text[i:i + 5]}, "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield f"data: {json.dumps({**head, 'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'stop'}]})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    def tool_calls(body: dict[str, Any], base: dict[str, Any], own: str,
                   custom: list[str] | None = None) -> Response:
        plain = json.dumps({"to": own, "body": f"Hello {own}"})
        arguments = custom if custom is not None else [plain, plain.replace("<", "\\u003c").replace(">", "\\u003e")]
        choices = int(body.get("n") or 1)

        def call(n: int, i: int, text: str) -> dict[str, Any]:
            if custom is not None:
                return {"id": f"call_{n}_{i}", "type": "custom", "custom": {"name": "shell", "input": text}}
            return {"id": f"call_{n}_{i}", "type": "function", "function": {"name": "send_email", "arguments": text}}

        def piece(i: int, text: str) -> dict[str, Any]:
            return {"index": i, "custom": {"input": text}} if custom is not None \
                else {"index": i, "function": {"arguments": text}}

        if not body.get("stream"):
            return JSONResponse({**base, "object": "chat.completion", "choices": [
                {"index": n, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": None, "tool_calls": [call(n, i, a) for i, a in enumerate(arguments)]}}
                for n in range(choices)], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        async def events():  # type: ignore[no-untyped-def]
            head = {**base, "object": "chat.completion.chunk"}

            def chunk(n: int, delta: dict[str, Any], finish: str | None = None) -> str:
                return f"data: {json.dumps({**head, 'choices': [{'index': n, 'delta': delta, 'finish_reason': finish}]})}\n\n"

            for n in range(choices):
                yield chunk(n, {"role": "assistant", "content": None,
                                "tool_calls": [{"index": i, **call(n, i, "")} for i in range(len(arguments))]})
            for at in range(0, max(map(len, arguments)), 3):
                for n in range(choices):
                    for i, text in enumerate(arguments):
                        if text[at:at + 3]:
                            yield chunk(n, {"tool_calls": [piece(i, text[at:at + 3])]})
            for n in range(choices):
                yield chunk(n, {}, "tool_calls")
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "test"}]})

    async def set_mode(request: Request) -> Response:
        asked = await request.json()
        state["mode"] = asked["mode"]
        state["text"] = asked.get("text", state["text"])
        state["transform"] = asked.get("transform", state.get("transform", ""))
        return JSONResponse({"mode": state["mode"]})

    async def received(request: Request) -> Response:
        return JSONResponse(state["received"])

    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/_mode", set_mode, methods=["POST"]),
        Route("/_received", received, methods=["GET"]),
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
