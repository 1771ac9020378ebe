"""Anthropic Messages API (``POST /v1/messages``): the request, translations to and from chat, errors.

Served: ``system`` (a string or text blocks), ``messages`` with text, ``tool_use``, ``tool_result``
and text ``document`` blocks, ``tools`` and ``tool_choice``, ``stop_sequences``, sampling fields,
``stream`` with its events (``message_start``, ``content_block_start`` / ``_delta`` (``text_delta``,
``input_json_delta``) / ``_stop``, ``message_delta``, ``message_stop``). What does not translate to a
chat request: ``image`` blocks and PDF / base64 ``document`` blocks on a text model (400), extended
``thinking`` (400); earlier turns' ``thinking`` blocks are left out of the prompt, as Anthropic itself
does; ``stop_reason: stop_sequence`` cannot be told from ``end_turn`` (chat does not say which stop
matched), ``cache_control`` marks are accepted and have no effect.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvfence.apis.common import arguments_object, validate
from kvfence.errors import RequestError

__all__ = ["ChatChunks", "MessageEvents", "MessagesRequest", "anthropic_error", "chat_from_message", "chat_request",
           "error_type_for", "message_from_chat", "messages_request_from_chat", "text_paths"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MessageParam(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class MessagesRequest(_Strict):
    """Body of ``POST /v1/messages`` (an allowlist: an unknown field is a 400)."""

    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=1)
    stream: bool | None = None
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    service_tier: str | None = None
    cache_control: dict[str, Any] | None = None  # accepted; prompt caching here is the server's (I5)
    cache_salt: str | None = None  # vLLM's extra; the gateway sets its own

    @classmethod
    def parse(cls, body: Any) -> MessagesRequest:
        return validate(cls, body, "/v1/messages")


class CountTokensRequest(_Strict):
    """Body of ``POST /v1/messages/count_tokens``."""

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None

    @classmethod
    def parse(cls, body: Any) -> CountTokensRequest:
        return validate(cls, body, "/v1/messages/count_tokens")


Path = tuple[str | int, ...]


def _block_paths(block: Any, path: Path, role: str | None) -> list[tuple[Path, str, str | None]]:
    if not isinstance(block, dict):
        return []
    out: list[tuple[Path, str, str | None]] = []
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        out.append(((*path, "text"), block["text"], role))
    elif kind == "thinking" and isinstance(block.get("thinking"), str):
        out.append(((*path, "thinking"), block["thinking"], role))
    elif kind == "tool_use":
        out += _json_paths(block.get("input"), (*path, "input"), role)
    elif kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            out.append(((*path, "content"), content, "tool"))
        elif isinstance(content, list):
            for j, inner in enumerate(content):
                out += _block_paths(inner, (*path, "content", j), "tool")
    elif kind == "document":
        source = block.get("source")
        if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
            out.append(((*path, "source", "data"), source["data"], role))
        if isinstance(source, dict) and source.get("type") == "content" and isinstance(source.get("content"), list):
            for j, inner in enumerate(source["content"]):
                out += _block_paths(inner, (*path, "source", "content", j), role)
        for key in ("title", "context"):
            if isinstance(block.get(key), str):
                out.append(((*path, key), block[key], role))
    return out


def _json_paths(value: Any, path: Path, role: str | None, depth: int = 0) -> list[tuple[Path, str, str | None]]:
    """Every string in a tool call's ``input`` (an object, not a JSON text: each value is its own slot)."""
    if depth > 32:
        return []
    if isinstance(value, str):
        return [(path, value, role)] if value else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _json_paths(v, (*path, k), role, depth + 1)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _json_paths(v, (*path, i), role, depth + 1)]
    return []


def text_paths(body: dict[str, Any]) -> list[tuple[Path, str, str | None]]:
    """(path, text, role) of every string of a Messages request that reaches the model as prompt text:
    ``system``, every text / thinking block, every string inside a ``tool_use`` input, ``tool_result``
    contents, text documents (data, title, context). ``tools`` are scanned by the caller like chat's."""
    out: list[tuple[Path, str, str | None]] = []
    system = body.get("system")
    if isinstance(system, str):
        out.append((("system",), system, "system"))
    elif isinstance(system, list):
        for j, block in enumerate(system):
            out += _block_paths(block, ("system", j), "system")
    for i, message in enumerate(body.get("messages") or []):
        if not isinstance(message, dict):
            continue
        role = message.get("role") if isinstance(message.get("role"), str) else None
        content = message.get("content")
        if isinstance(content, str):
            out.append((("messages", i, "content"), content, role))
        elif isinstance(content, list):
            for j, block in enumerate(content):
                out += _block_paths(block, ("messages", i, "content", j), role)
    return out


def _block_text(block: dict[str, Any], where: str) -> str | None:
    """The prompt text of a user-side block (None: a block that adds nothing, such as thinking)."""
    kind = block.get("type")
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise RequestError(f"{where}.text must be a string", param="messages")
        return str(block["text"])
    if kind == "document":
        source = block.get("source")
        if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
            title = block.get("title")
            return f"{title}\n\n{source['data']}" if isinstance(title, str) and title else str(source["data"])
        raise RequestError(f"{where}: only text documents (source type 'text') translate to a text model's "
                           "prompt", param="messages")
    if kind in ("thinking", "redacted_thinking"):
        return None  # earlier turns' thinking is not part of the prompt (as at Anthropic)
    if kind == "image":
        raise RequestError(f"{where}: image blocks are not supported by a text-only model", param="messages")
    raise RequestError(f"{where}: content blocks of type {kind!r} are not supported here (text, document, "
                       "tool_use, tool_result)", param="messages")


def _system_text(system: str | list[dict[str, Any]] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system
    texts = [_block_text(b, f"system[{j}]") if isinstance(b, dict) else None for j, b in enumerate(system)]
    return "\n".join(t for t in texts if t is not None)


def _chat_messages(messages: list[MessageParam], system: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system_text = _system_text(system)
    if system_text:
        out.append({"role": "system", "content": system_text})
    for i, message in enumerate(messages):
        if isinstance(message.content, str):
            out.append({"role": message.role, "content": message.content})
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(message.content):
            where = f"messages[{i}].content[{j}]"
            if not isinstance(block, dict):
                raise RequestError(f"{where} must be an object", param="messages")
            kind = block.get("type")
            if kind == "tool_use" and message.role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    raise RequestError(f"{where}: a tool_use block needs a string id and name", param="messages")
                calls.append({"id": block["id"], "type": "function",
                              "function": {"name": block["name"], "arguments": json.dumps(block.get("input") or {})}})
            elif kind == "tool_result" and message.role == "user":
                content = block.get("content")
                if isinstance(content, list):
                    parts = [_block_text(b, f"{where}.content[{k}]") for k, b in enumerate(content)
                             if isinstance(b, dict)]
                    content = "\n".join(p for p in parts if p is not None)
                if not isinstance(block.get("tool_use_id"), str):
                    raise RequestError(f"{where}: a tool_result block needs a string tool_use_id", param="messages")
                if block.get("is_error"):
                    content = f"Error: {content or ''}"
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": content or ""})
            else:
                text = _block_text(block, where)
                if text is not None:
                    texts.append(text)
        if texts or calls:
            entry: dict[str, Any] = {"role": message.role, "content": "\n".join(texts) if texts else None}
            if calls:
                entry["tool_calls"] = calls
            if entry["content"] is None and message.role == "user":
                entry["content"] = ""
            out.append(entry)
    return out


def _chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") not in (None, "custom") or not isinstance(tool.get("name"), str):
            raise RequestError(f"tools[{i}]: only client tools with a name and input_schema are supported; server "
                               f"tools ({tool.get('type')!r}) run at Anthropic, not here", param="tools")
        function: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: dict[str, Any] | None) -> tuple[Any, bool | None]:
    if choice is None:
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice.get("type")
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise RequestError(f"tool_choice {json.dumps(choice)[:80]} is not supported (auto, any, none, or a tool by "
                       "name)", param="tool_choice")


def chat_request(req: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    """The chat completion request that asks the model the same thing (``stream`` included)."""
    if req.thinking is not None and req.thinking.get("type") not in (None, "disabled"):
        raise RequestError("extended thinking is not supported here", param="thinking")
    body: dict[str, Any] = {"model": req.model, "messages": _chat_messages(req.messages, req.system)}
    tools = _chat_tools(req.tools)
    if tools is not None:
        body["tools"] = tools
    choice, parallel = _chat_tool_choice(req.tool_choice)
    if choice is not None and tools is not None:
        body["tool_choice"] = choice
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    if isinstance(req, MessagesRequest):
        body["max_tokens"] = req.max_tokens
        for key, value in (("stop", req.stop_sequences or None), ("temperature", req.temperature),
                           ("top_p", req.top_p), ("top_k", req.top_k), ("cache_salt", req.cache_salt)):
            if value is not None:
                body[key] = value
        user = (req.metadata or {}).get("user_id")
        if isinstance(user, str):
            body["user"] = user
        if req.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
    return body


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                 "content_filter": "refusal"}


def _stop_reason(finish_reason: Any, called: bool) -> str:
    # a named tool_choice ends with "stop" in chat (as at OpenAI); Anthropic says tool_use for any call
    if called and finish_reason != "length":
        return "tool_use"
    return _STOP_REASONS.get(str(finish_reason), "end_turn")


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def _usage(chat_usage: Any) -> dict[str, Any]:
    usage = chat_usage if isinstance(chat_usage, dict) else {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {"input_tokens": int(usage.get("prompt_tokens") or 0) - cached,
            "output_tokens": int(usage.get("completion_tokens") or 0),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def message_from_chat(chat: dict[str, Any], req: MessagesRequest, *, message_id: str | None = None) -> dict[str, Any]:
    """A whole chat completion (its first choice) as an Anthropic Message."""
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str) and message[key]:
            content.append({"type": "thinking", "thinking": message[key], "signature": ""})
            break
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    cut = choice.get("finish_reason") == "length"
    for k, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {} if isinstance(call, dict) else {}
        arguments = function.get("arguments") or ""
        try:
            value = arguments_object(arguments, f"tool call {k}")
        except RequestError:
            if not cut:
                raise
            value = {}  # cut by max_tokens inside the call: its input is incomplete (stop_reason says so)
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                        "name": function.get("name") or "", "input": value})
    stop = _stop_reason(choice.get("finish_reason"), any(b["type"] == "tool_use" for b in content))
    return {"id": message_id or new_message_id(), "type": "message", "role": "assistant",
            "model": str(chat.get("model") or req.model), "content": content,
            "stop_reason": stop, "stop_sequence": None,
            "usage": _usage(chat.get("usage"))}


class MessageEvents:
    """Chat completion chunks (decoded) in, Anthropic's stream events out: (event name, payload)."""

    def __init__(self, req: MessagesRequest, *, message_id: str | None = None, model: str | None = None) -> None:
        self._message: dict[str, Any] = {"id": message_id or new_message_id(), "type": "message", "role": "assistant",
                         "model": model or req.model, "content": [], "stop_reason": None, "stop_sequence": None,
                         "usage": {"input_tokens": 0, "output_tokens": 0}}
        self._started = False
        self._open: tuple[str, int] | None = None  # ("text" | "thinking" | "tool:<i>", block index)
        self._blocks = 0
        self._finish: str | None = None
        self._usage: Any = None
        self._called = False

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        if self._started:
            return []
        self._started = True
        return [("message_start", {"type": "message_start", "message": json.loads(json.dumps(self._message))})]

    def _switch(self, kind: str, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if self._open is not None and self._open[0] == kind:
            return []
        events = self._close()
        self._open = (kind, self._blocks)
        self._blocks += 1
        events.append(("content_block_start", {"type": "content_block_start", "index": self._open[1],
                                               "content_block": block}))
        return events

    def _close(self) -> list[tuple[str, dict[str, Any]]]:
        if self._open is None:
            return []
        index = self._open[1]
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": index})]

    def _delta(self, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        assert self._open is not None
        return ("content_block_delta", {"type": "content_block_delta", "index": self._open[1], "delta": delta})

    def feed(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        events = self.start()
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or int(choice.get("index") or 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str) and delta[key]:
                    events += self._switch("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                    events.append(self._delta({"type": "thinking_delta", "thinking": delta[key]}))
            text = delta.get("content")
            if isinstance(text, str) and text:
                events += self._switch("text", {"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": text}))
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                function = call.get("function") or {}
                kind = f"tool:{int(call.get('index') or 0)}"
                self._called = True
                events += self._switch(kind, {"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                                              "name": function.get("name") or "", "input": {}})
                if isinstance(function.get("arguments"), str) and function["arguments"]:
                    events.append(self._delta({"type": "input_json_delta", "partial_json": function["arguments"]}))
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        return events

    def finish(self) -> list[tuple[str, dict[str, Any]]]:
        usage = _usage(self._usage)
        return [*self.start(), *self._close(),
                ("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": _stop_reason(self._finish, self._called),
                                             "stop_sequence": None},
                                   "usage": {"output_tokens": usage["output_tokens"],
                                             "input_tokens": usage["input_tokens"]}}),
                ("message_stop", {"type": "message_stop"})]


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
                529: "overloaded_error"}


def error_type_for(status: int) -> str:
    return _ERROR_TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "api_error")


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": error_type_for(status), "message": message}}


def anthropic_error_from_openai(status: int, body: Any) -> dict[str, Any]:
    """An OpenAI-shaped error body (``{"error": {"message": ...}}``) in Anthropic's shape."""
    message = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    return anthropic_error(status, message if isinstance(message, str) else f"HTTP {status}")


# -- chat completions -> Messages (a chat caller, a backend that speaks only Anthropic's API) -------------

DEFAULT_MAX_TOKENS = 4096  # Messages requires max_tokens; a chat request may leave it out
# Chat fields that change the answer and have no Messages counterpart: refused, never dropped.
_UNTRANSLATED_CHAT = ("logprobs", "top_logprobs", "logit_bias", "seed", "frequency_penalty", "presence_penalty",
                      "audio", "modalities", "prediction", "web_search_options", "functions", "function_call",
                      "response_format", "guided_json", "structured_outputs", "best_of", "echo")
_CHAT_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                 "refusal": "content_filter", "pause_turn": "stop"}


def _image_block(part: dict[str, Any], where: str) -> dict[str, Any]:
    url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else None
    if not isinstance(url, str):
        raise RequestError(f"{where}: an image_url part needs image_url.url", param="messages")
    if url.startswith("data:") and ";base64," in url:
        media, _, data = url[5:].partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _chat_content_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise RequestError(f"{where}.content must be a string or a list of parts", param="messages")
    blocks = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            blocks.append(_image_block(part, f"{where}.content[{j}]"))
        else:
            raise RequestError(f"{where}.content[{j}]: parts of type {kind!r} do not translate to Anthropic's "
                               "Messages API (text and image_url do)", param="messages")
    return blocks


def messages_request_from_chat(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat completion request as the Messages request that asks the same thing (``docs/apis.md``
    lists what does not translate: those fields are refused with a 400 naming them)."""
    for name in _UNTRANSLATED_CHAT:
        value = chat.get(name)
        neutral = value is None or value is False or value == [] or (
            name.endswith("_penalty") and value == 0) or (
            name == "response_format" and isinstance(value, dict) and value.get("type") in (None, "text"))
        if not neutral:
            raise RequestError(f"`{name}` does not translate to Anthropic's Messages API, which this backend speaks",
                               param=name)
    if (chat.get("n") or 1) != 1:
        raise RequestError("`n` > 1 does not translate to Anthropic's Messages API (one answer per request)",
                           param="n")
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(chat.get("messages") or []):
        where = f"messages[{i}]"
        role = message.get("role")
        if role in ("system", "developer"):
            system += [b["text"] for b in _chat_content_blocks(message.get("content"), where)
                       if b["type"] == "text"]
            continue
        if role == "tool":
            content = message.get("content")
            text = content if isinstance(content, str) else "\n".join(
                b.get("text", "") for b in _chat_content_blocks(content, where))
            block = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or ""), "content": text}
            if messages and messages[-1]["role"] == "user" and messages[-1].get("_tool_results"):
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block], "_tool_results": True})
            continue
        if role not in ("user", "assistant"):
            raise RequestError(f"{where}.role {role!r} does not translate to Anthropic's Messages API",
                               param="messages")
        blocks = _chat_content_blocks(message.get("content"), where)
        for k, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                raise RequestError(f"{where}.tool_calls[{k}] needs a function", param="messages")
            blocks.append({"type": "tool_use", "id": str(call.get("id") or f"toolu_{i}_{k}"),
                           "name": str(function.get("name") or ""),
                           "input": arguments_object(str(function.get("arguments") or ""), f"{where}.tool_calls[{k}]")})
        messages.append({"role": role, "content": blocks})
    for m in messages:
        m.pop("_tool_results", None)
    body: dict[str, Any] = {"model": chat.get("model"), "messages": messages,
                            "max_tokens": chat.get("max_completion_tokens") or chat.get("max_tokens")
                            or DEFAULT_MAX_TOKENS}
    if system:
        body["system"] = "\n\n".join(system)
    if chat.get("tools"):
        tools = []
        for t, tool in enumerate(chat["tools"]):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or tool.get("type") != "function":
                raise RequestError(f"tools[{t}]: only function tools translate", param="tools")
            entry = {"name": function.get("name"), "input_schema": function.get("parameters") or {"type": "object"}}
            if function.get("description"):
                entry["description"] = function["description"]
            tools.append(entry)
        body["tools"] = tools
    choice = chat.get("tool_choice")
    if choice is not None:
        named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        body["tool_choice"] = ({"type": "tool", "name": named} if named else
                               {"type": {"auto": "auto", "required": "any", "none": "none"}.get(str(choice), "auto")})
    if chat.get("parallel_tool_calls") is False and body.get("tools"):
        body.setdefault("tool_choice", {"type": "auto"})["disable_parallel_tool_use"] = True
    stop = chat.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    for key in ("temperature", "top_p", "top_k", "stream"):
        if chat.get(key) is not None:
            body[key] = chat[key]
    if isinstance(chat.get("temperature"), int | float) and chat["temperature"] > 1:
        raise RequestError("`temperature` above 1 does not translate to Anthropic's Messages API (0 to 1)",
                           param="temperature")
    if isinstance(chat.get("user"), str):
        body["metadata"] = {"user_id": chat["user"]}
    return body


def _chat_usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    cached = int(usage.get("cache_read_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + cached + int(usage.get("cache_creation_input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def chat_from_message(message: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole Message as the chat completion a chat caller expects."""
    texts, reasoning, calls = [], [], []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif block.get("type") == "tool_use":
            calls.append({"id": block.get("id"), "type": "function", "function": {
                "name": block.get("name"), "arguments": json.dumps(block.get("input") or {})}})
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        out["reasoning_content"] = "".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    return {"id": "chatcmpl-" + str(message.get("id") or uuid.uuid4().hex), "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": out, "logprobs": None,
                         "finish_reason": _CHAT_REASONS.get(str(message.get("stop_reason")), "stop")}],
            "usage": _chat_usage(message.get("usage"))}


class ChatChunks:
    """Anthropic stream events in, chat completion chunks out (dicts; ``[DONE]`` is the caller's)."""

    def __init__(self, model: str, *, include_usage: bool = False) -> None:
        self._base = {"id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion.chunk",
                      "created": int(time.time()), "model": model}
        self._include_usage = include_usage
        self._calls: dict[int, int] = {}  # content block index -> tool call index
        self._usage: dict[str, Any] = {}
        self.finished = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**self._base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self._usage.update(message.get("usage") or {})
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                at = self._calls.setdefault(int(event.get("index") or 0), len(self._calls))
                return [self._chunk({"tool_calls": [{"index": at, "id": block.get("id"), "type": "function",
                                                     "function": {"name": block.get("name"), "arguments": ""}}]})]
            if block.get("type") == "text" and block.get("text"):
                return [self._chunk({"content": block["text"]})]
            return []
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                return [self._chunk({"content": delta.get("text") or ""})]
            if delta.get("type") == "thinking_delta":
                return [self._chunk({"reasoning_content": delta.get("thinking") or ""})]
            if delta.get("type") == "input_json_delta":
                at = self._calls.get(int(event.get("index") or 0), 0)
                return [self._chunk({"tool_calls": [{"index": at, "function": {
                    "arguments": delta.get("partial_json") or ""}}]})]
            return []
        if kind == "message_delta":
            self._usage.update(event.get("usage") or {})
            reason = (event.get("delta") or {}).get("stop_reason")
            self.finished = True
            out = [self._chunk({}, _CHAT_REASONS.get(str(reason), "stop"))]
            if self._include_usage:
                out.append({**self._base, "choices": [], "usage": _chat_usage(self._usage)})
            return out
        return []

    def output_tokens(self) -> int | None:
        value = self._usage.get("output_tokens")
        return value if isinstance(value, int) else None
