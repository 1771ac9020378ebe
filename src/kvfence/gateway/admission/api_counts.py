"""Prompt tokens of a Responses, Messages or embeddings request, for the caps (``caps.py``).

A Responses or Messages request is counted as the chat request it translates to (:mod:`kvfence.apis`),
with the backend's chat template when the gateway has its tokenizer; one that does not translate to
chat (image or PDF blocks for a backend that speaks Messages natively) is counted part by part with
the stated over-counting bound (its texts, its tools, ``PER_MEDIA_PART`` per media block). Each
embedding input is its own prompt: every one must fit.
"""

from __future__ import annotations

import json
from typing import Any

from kvfence.apis import messages, responses
from kvfence.errors import RequestError
from kvfence.gateway.admission.tokens import (
    PER_MEDIA_PART,
    PER_MESSAGE_OVERHEAD,
    PER_REQUEST_OVERHEAD,
    TokenCounter,
)
from kvfence.gateway.errors import GatewayRequestError

__all__ = ["API_ENDPOINTS", "api_prompt_sizes"]

API_ENDPOINTS = frozenset({"responses", "messages", "count_tokens", "embeddings"})
_MEDIA_BLOCKS = frozenset({"image", "input_image", "input_file", "input_audio"})


def _media_blocks(value: Any, depth: int = 0) -> int:
    if depth > 8:
        return 0
    if isinstance(value, dict):
        kind = value.get("type")
        own = 1 if kind in _MEDIA_BLOCKS or (kind == "document" and (value.get("source") or {}).get("type") != "text") else 0
        return own + sum(_media_blocks(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return sum(_media_blocks(v, depth + 1) for v in value)
    return 0


def _by_parts(counter: TokenCounter, endpoint: str, body: dict[str, Any]) -> int:
    paths = messages.text_paths(body) if endpoint in ("messages", "count_tokens") else responses.text_paths(body)
    items = body.get("messages") if endpoint != "responses" else body.get("input")
    turns = len(items) if isinstance(items, list) else 1
    tools = json.dumps(body["tools"]) if body.get("tools") else ""
    return (sum(counter.count_text(text) for _, text, _ in paths) + (counter.count_text(tools) if tools else 0)
            + PER_MEDIA_PART * _media_blocks(items) + PER_MESSAGE_OVERHEAD * (turns + 1) + PER_REQUEST_OVERHEAD)


def api_prompt_sizes(counter: TokenCounter, endpoint: str, body: dict[str, Any]) -> list[int]:
    """Prompt tokens of each prompt of the body (one, or one per embedding input)."""
    if endpoint == "embeddings":
        value = body.get("input")
        texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] \
            if isinstance(value, list) else []
        return [counter.count_text(t) for t in texts]
    try:
        if endpoint == "responses":
            chat = responses.chat_request(responses.ResponsesRequest.parse(body))
        else:
            parse = messages.CountTokensRequest if endpoint == "count_tokens" else messages.MessagesRequest
            chat = messages.chat_request(parse.parse(body))
    except RequestError:
        try:
            return [_by_parts(counter, endpoint, body)]
        except RequestError as exc:
            raise GatewayRequestError(exc.message, param=exc.param) from None
    tools = [t for t in chat.get("tools") or []] or None
    return [counter.count_chat(chat["messages"], tools)]
