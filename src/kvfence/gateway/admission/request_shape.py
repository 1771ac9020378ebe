"""The shape of a completion request, checked before anything reads or forwards it.

A proxy that forwards a malformed body passes the blame on: the backend answers 500 or crashes
(seen: ``messages: []`` and ``content: 5`` made a backend fail, which the caller saw as a 503),
and the protection hooks and length caps, which read the same fields, may skip what they do not
recognise. The checks follow OpenAI's own 400s for the same bodies and are no stricter: fields
they do not name are the backend's to judge.
"""

from __future__ import annotations

from typing import Any

from kvfence.gateway.errors import GatewayRequestError

__all__ = ["check_request_shape"]

_CONTENT_ROLES_MAY_OMIT = frozenset({"assistant"})  # an assistant turn may carry only tool_calls


def check_request_shape(body: dict[str, Any], endpoint: str) -> None:
    """Raise :class:`GatewayRequestError` (400, naming the field) for a body OpenAI would refuse."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise GatewayRequestError("`stream` must be a boolean", param="stream")
    if endpoint == "chat":
        _check_messages(body.get("messages"))
    elif "prompt" in body:
        _check_prompt(body["prompt"])


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise GatewayRequestError("`messages` must be a non-empty list of message objects", param="messages")
    for i, message in enumerate(messages):  # the field's name is built only for an error (hot path)
        if not isinstance(message, dict):
            raise GatewayRequestError(f"messages[{i}] must be an object with a `role`", param=f"messages[{i}]")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise GatewayRequestError(f"messages[{i}].role must be a non-empty string", param=f"messages[{i}].role")
        content = message.get("content")
        if content is None:
            if role not in _CONTENT_ROLES_MAY_OMIT:
                raise GatewayRequestError(f"messages[{i}].content is required for a {role!r} message",
                                          param=f"messages[{i}].content")
        elif isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise GatewayRequestError(f"messages[{i}].content[{j}] must be an object with a string `type`",
                                              param=f"messages[{i}].content[{j}]")
        elif not isinstance(content, str):
            raise GatewayRequestError(f"messages[{i}].content must be a string or a list of content parts",
                                      param=f"messages[{i}].content")


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt) or _token_ids(prompt):
            return
        if all(isinstance(p, list) and p and _token_ids(p) for p in prompt):
            return
    raise GatewayRequestError("`prompt` must be a string, a list of strings, a list of token ids or a list of "
                              "token-id lists (none empty)", param="prompt")


def _token_ids(items: list[Any]) -> bool:
    return all(isinstance(t, int) and not isinstance(t, bool) for t in items)
