"""``/v1/responses`` and ``/v1/messages`` on the chat path: the same engine, admission and scope.

Each request is translated into a chat completion request (:mod:`kvfence.apis`), validated like one
(``ChatCompletionRequest``: the same 400s), and served by the chat handler, so I3 (prompt plus
``max_tokens`` checked before anything is queued) and I5 (the scope from the authenticated key) hold
with no second copy of either; the chat answer, whole or streamed, is translated back. Anthropic's
error shape is applied to every error a Messages call answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from kvfence.apis import messages as anthropic
from kvfence.apis import responses as openai_responses
from kvfence.openai_wire import encode_event
from kvfence.server.openai.protocol import ChatCompletionRequest, validate_body

__all__ = ["MessagesAdapter", "ResponsesAdapter", "anthropic_shaped"]


def _named_event(name: str, payload: dict[str, Any]) -> bytes:
    return encode_event(payload, event=name)  # the framing of every kvfence stream: kvfence.openai_wire


class ResponsesAdapter:
    """One ``/v1/responses`` call: its native request and the chat request that serves it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.native = openai_responses.ResponsesRequest.parse(data)
        openai_responses.refuse_state(self.native)
        self.chat: ChatCompletionRequest = validate_body(openai_responses.chat_request(self.native),
                                                         ChatCompletionRequest)
        self.response_id = openai_responses.new_response_id()

    def whole(self, chat: dict[str, Any]) -> dict[str, Any]:
        return openai_responses.response_from_chat(chat, self.native, response_id=self.response_id)

    async def stream(self, payloads: AsyncIterator[dict[str, Any] | str], model: str) -> AsyncIterator[bytes]:
        events = openai_responses.ResponseEvents(self.native, response_id=self.response_id, model=model)
        async for payload in payloads:
            if payload == "[DONE]":
                out = events.finish()
            elif isinstance(payload, dict) and "error" in payload:
                error = payload["error"]
                out = [*events.start(), events.error(str(error.get("message")), error.get("code"))]
            elif isinstance(payload, dict):
                out = events.feed(payload)
            else:
                continue
            if out:
                yield b"".join(_named_event(e["type"], e) for e in out)


class MessagesAdapter:
    """One ``/v1/messages`` call: its native request and the chat request that serves it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.native = anthropic.MessagesRequest.parse(data)
        self.chat: ChatCompletionRequest = validate_body(anthropic.chat_request(self.native), ChatCompletionRequest)
        self.message_id = anthropic.new_message_id()

    def whole(self, chat: dict[str, Any]) -> dict[str, Any]:
        return anthropic.message_from_chat(chat, self.native, message_id=self.message_id)

    async def stream(self, payloads: AsyncIterator[dict[str, Any] | str], model: str) -> AsyncIterator[bytes]:
        events = anthropic.MessageEvents(self.native, message_id=self.message_id, model=model)
        async for payload in payloads:
            if payload == "[DONE]":
                out = events.finish()
            elif isinstance(payload, dict) and "error" in payload:
                message = str(payload["error"].get("message"))
                out = [*events.start(), ("error", anthropic.anthropic_error(500, message))]
            elif isinstance(payload, dict):
                out = events.feed(payload)
            else:
                continue
            if out:
                yield b"".join(_named_event(name, e) for name, e in out)


def anthropic_shaped(response: Response) -> Response:
    """An error answer in Anthropic's shape (``{"type": "error", "error": {...}}``); others unchanged."""
    if response.status_code < 400 or not isinstance(response.body, bytes | memoryview):
        return response
    try:
        body = json.loads(bytes(response.body))
    except ValueError:
        return response
    shaped = json.dumps(anthropic.anthropic_error_from_openai(response.status_code, body)).encode()
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
    return Response(shaped, status_code=response.status_code, headers=headers, media_type="application/json")
