"""Where the text of a request lives, so every piece of it is scanned and can be rewritten.

Responses, Messages and embeddings requests: their adapters in :mod:`kvfence.apis` say where
(``text_paths``), and the shared fields below (``tools``, schemas, ``metadata``) are scanned alike.

Chat: each message's ``content`` (a string, or a list of parts whose ``text`` parts count), its
``name`` (chat templates render it into the prompt), an assistant message's ``refusal`` and
``reasoning_content`` / ``reasoning`` (templates that render earlier reasoning), the ``arguments`` of
assistant tool calls, the free-text ``input`` of custom tool calls and the legacy ``function_call``'s
``arguments``; completions: ``prompt`` (a string or a list of strings) and ``suffix``
(text the model writes before, sent upstream like the prompt). System, user, assistant, tool and
function messages are all scanned alike. Both endpoints: every string value inside the structures the
backend turns into prompt text or decoding constraints (``tools`` / ``functions`` descriptions and
schemas, ``response_format`` JSON schemas, vLLM's ``guided_json`` / ``guided_choice`` /
``structured_outputs``), except the structural keys of a schema (``type``, ``$ref``, ``name`` ...).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvfence.gateway.errors import GatewayRequestError

__all__ = ["TextSlot", "set_texts", "text_slots"]

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class TextSlot:
    """One string of the request body and the path to it."""

    path: Path
    text: str
    role: str | None = None


# Besides `content`: what an earlier assistant turn may carry back into the prompt.
_ASSISTANT_TEXTS = ("refusal", "reasoning_content", "reasoning")


def _chat_slots(body: dict[str, Any]) -> list[TextSlot]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise GatewayRequestError("`messages` must be a list of message objects", param="messages")
    slots: list[TextSlot] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise GatewayRequestError(f"messages[{i}] must be an object", param="messages")
        role = message.get("role") if isinstance(message.get("role"), str) else None
        if isinstance(message.get("name"), str):
            slots.append(TextSlot(("messages", i, "name"), message["name"], role))
        content = message.get("content")
        if isinstance(content, str):
            slots.append(TextSlot(("messages", i, "content"), content, role))
        elif isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    slots.append(TextSlot(("messages", i, "content", j, "text"), part["text"], role))
        for key in _ASSISTANT_TEXTS:
            if isinstance(message.get(key), str):
                slots.append(TextSlot(("messages", i, key), message[key], role))
        for k, call in enumerate(message.get("tool_calls") or []):
            if not isinstance(call, dict):
                continue
            for kind, field in (("function", "arguments"), ("custom", "input")):
                part = call.get(kind)
                if isinstance(part, dict) and isinstance(part.get(field), str):
                    slots.append(TextSlot(("messages", i, "tool_calls", k, kind, field), part[field], role))
        # The deprecated single-call form (OpenAI `functions` API) still reaches every backend.
        legacy = message.get("function_call")
        if isinstance(legacy, dict) and isinstance(legacy.get("arguments"), str):
            slots.append(TextSlot(("messages", i, "function_call", "arguments"), legacy["arguments"], role))
    return slots


def _completion_slots(body: dict[str, Any]) -> list[TextSlot]:
    prompt = body.get("prompt")
    suffix = body.get("suffix")
    # The suffix is sent upstream with the prompt, so it is scanned (and rewritten) like it.
    tail = [TextSlot(("suffix",), suffix)] if isinstance(suffix, str) else []
    if isinstance(prompt, str):
        return [TextSlot(("prompt",), prompt), *tail]
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return [*(TextSlot(("prompt", j), p) for j, p in enumerate(prompt)), *tail]
    if prompt is None:
        return tail
    # Token ids cannot be read by a text detector; forwarding them unscanned would not fail closed.
    raise GatewayRequestError("data protection is on for this gateway, and a `prompt` given as token ids "
                              "cannot be scanned: send the prompt as text", param="prompt")


# Request fields whose strings reach the model as prompt text (tool and schema descriptions, enum
# values, examples) or constrain what it writes.
_SCHEMA_FIELDS = ("tools", "functions", "response_format", "guided_json", "guided_choice", "structured_outputs",
                  # text the model is given besides the messages (predicted output, vLLM's RAG
                  # `documents`), and what a hosted API stores with the request (`user`, `metadata`)
                  "prediction", "documents", "user", "metadata")
# Keys whose string values are structure, not content: changing them would break the schema.
_STRUCTURAL_KEYS = frozenset({"type", "$ref", "$schema", "$id", "name", "format", "strict", "pattern",
                              "additionalProperties", "required", "tool_choice"})
_MAX_DEPTH = 32


def _json_slots(value: Any, path: Path, depth: int = 0) -> list[TextSlot]:
    if depth > _MAX_DEPTH:
        return []
    if isinstance(value, str):
        return [TextSlot(path, value)] if value else []
    if isinstance(value, dict):
        # a property *named* "name" is content; a "name" string is structure
        return [slot for key, item in value.items() if not (isinstance(item, str) and key in _STRUCTURAL_KEYS)
                for slot in _json_slots(item, (*path, key), depth + 1)]
    if isinstance(value, list):
        return [slot for i, item in enumerate(value) for slot in _json_slots(item, (*path, i), depth + 1)]
    return []


def _api_slots(endpoint: str, body: dict[str, Any]) -> list[TextSlot] | None:
    """The other APIs' texts, where their adapters say they live (:mod:`kvfence.apis`)."""
    from kvfence.apis import embeddings, messages, responses
    from kvfence.errors import RequestError

    paths = {"responses": responses.text_paths, "messages": messages.text_paths,
             "count_tokens": messages.text_paths, "embeddings": embeddings.text_paths}.get(endpoint)
    if paths is None:
        return None
    try:
        return [TextSlot(path, text, role) for path, text, role in paths(body)]
    except RequestError as exc:
        raise GatewayRequestError(exc.message, param=exc.param) from None


# Besides _SCHEMA_FIELDS: the Responses API's JSON schema lives in ``text.format``.
_API_SCHEMA_FIELDS = {"responses": ("text",)}


def text_slots(endpoint: str, body: dict[str, Any]) -> list[TextSlot]:
    """Every scannable string of a request body, in document order."""
    slots = _api_slots(endpoint, body)
    if slots is None:
        slots = _chat_slots(body) if endpoint == "chat" else _completion_slots(body)
    for key in (*_SCHEMA_FIELDS, *_API_SCHEMA_FIELDS.get(endpoint, ())):
        if key in body:
            slots += _json_slots(body[key], (key,))
    return slots


def set_texts(body: dict[str, Any], slots: Sequence[TextSlot], texts: Sequence[str]) -> dict[str, Any]:
    """A copy of ``body`` with each slot's string replaced; the input body is left untouched."""
    changed = [(slot, text) for slot, text in zip(slots, texts, strict=True) if text != slot.text]
    if not changed:
        return body
    result = copy.deepcopy(body)
    for slot, text in changed:
        node: Any = result
        for key in slot.path[:-1]:
            node = node[key]
        node[slot.path[-1]] = text
    return result
