"""OpenAI Responses API (``POST /v1/responses``): the request, and translations to and from chat.

Served: ``input`` as a string or a list of items (messages with ``input_text`` / ``output_text`` /
``refusal`` parts, ``function_call`` and ``function_call_output`` items), ``instructions``, function
``tools`` and ``tool_choice``, ``text.format`` (text, JSON object, JSON schema), sampling fields,
``stream`` with its typed events. Refused (400 naming the field): conversation state kept at the
server (``previous_response_id``, ``conversation``, ``store: true``, ``background``, stored ``prompt``
templates, ``item_reference`` items), hosted tools (web / file search, computer use ...), image and
file inputs (text models), and ``reasoning`` items (no translation to a chat prompt).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvfence.apis.common import validate
from kvfence.errors import RequestError

__all__ = ["STATE_FIELDS", "ResponseEvents", "ResponsesRequest", "chat_request", "response_from_chat",
           "text_paths"]

# Fields that make the server keep or read conversation state (a retention question, see docs/apis.md).
STATE_FIELDS = ("previous_response_id", "conversation", "background", "prompt")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: str | None = None


class ResponsesRequest(_Strict):
    """Body of ``POST /v1/responses`` (an allowlist: an unknown field is a 400)."""

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    service_tier: str | None = None
    reasoning: dict[str, Any] | None = None
    top_logprobs: int | None = None
    max_tool_calls: int | None = None
    cache_salt: str | None = None  # vLLM's extra; the gateway sets its own
    previous_response_id: str | None = None
    conversation: Any = None
    background: bool | None = None
    prompt: Any = None

    @classmethod
    def parse(cls, body: Any) -> ResponsesRequest:
        return validate(cls, body, "/v1/responses")


def _item_type(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    if not isinstance(kind, str):
        raise RequestError("each `input` item needs a string `type` (or a `role`, for a message)", param="input")
    return kind


_TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}


def _part_text(part: Any, where: str) -> str:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise RequestError(f"{where} must be an object with a string `type`", param="input")
    key = _TEXT_PARTS.get(part["type"])
    if key is None:
        raise RequestError(f"{where}: parts of type {part['type']!r} are not supported (text parts only: "
                           "input_text, output_text, refusal)", param="input")
    if not isinstance(part.get(key), str):
        raise RequestError(f"{where}.{key} must be a string", param="input")
    return str(part[key])


def text_paths(body: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str, str | None]]:
    """(path, text, role) of every string of a Responses request that reaches the model as prompt text:
    ``instructions``, each message's text (a string, or its parts' ``text`` / ``refusal``), each
    ``function_call``'s ``arguments`` and each ``function_call_output``'s ``output`` (a string or text
    parts), a reasoning item's summary and content texts. Tools and ``text.format`` schemas are scanned
    by the caller like chat's (their strings are prompt text too)."""
    out: list[tuple[tuple[str | int, ...], str, str | None]] = []
    if isinstance(body.get("instructions"), str):
        out.append((("instructions",), body["instructions"], "system"))
    items = body.get("input")
    if isinstance(items, str):
        return [*out, (("input",), items, "user")]
    if not isinstance(items, list):
        return out
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestError(f"input[{i}] must be an object", param="input")
        kind = _item_type(item)
        role = item.get("role") if isinstance(item.get("role"), str) else None
        if kind == "message":
            content = item.get("content")
            if isinstance(content, str):
                out.append((("input", i, "content"), content, role))
            elif isinstance(content, list):
                for j, part in enumerate(content):
                    if isinstance(part, dict):
                        for key in ("text", "refusal"):
                            if isinstance(part.get(key), str):
                                out.append((("input", i, "content", j, key), part[key], role))
        elif kind == "function_call":
            if isinstance(item.get("arguments"), str):
                out.append((("input", i, "arguments"), item["arguments"], "assistant"))
        elif kind == "function_call_output":
            output = item.get("output")
            if isinstance(output, str):
                out.append((("input", i, "output"), output, "tool"))
            elif isinstance(output, list):
                for j, part in enumerate(output):
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        out.append((("input", i, "output", j, "text"), part["text"], "tool"))
        elif kind == "reasoning":
            for key in ("summary", "content"):
                for j, part in enumerate(item.get(key) or []):
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        out.append((("input", i, key, j, "text"), part["text"], "assistant"))
    return out


def _messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        messages.append({"role": "user", "content": req.input})
        return messages
    for i, item in enumerate(req.input):
        kind = _item_type(item)
        where = f"input[{i}]"
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise RequestError(f"{where}.role must be user, assistant, system or developer", param="input")
            content = item.get("content")
            if isinstance(content, str):
                text = content
            elif isinstance(content, list):
                text = "\n".join(_part_text(p, f"{where}.content[{j}]") for j, p in enumerate(content))
            else:
                raise RequestError(f"{where}.content must be a string or a list of parts", param="input")
            messages.append({"role": role, "content": text})
        elif kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                if not isinstance(item.get(key), str):
                    raise RequestError(f"{where}.{key} must be a string", param="input")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)  # consecutive calls: one assistant turn, as chat has it
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = "\n".join(_part_text(p, f"{where}.output[{j}]") for j, p in enumerate(output))
            if not isinstance(item.get("call_id"), str) or not isinstance(output, str):
                raise RequestError(f"{where} needs a string `call_id` and `output`", param="input")
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
        elif kind == "item_reference":
            raise RequestError(f"{where}: item references read conversation state stored at the server, which "
                               "is not kept here", param="input")
        else:
            raise RequestError(f"{where}: input items of type {kind!r} are not supported (message, "
                               "function_call, function_call_output)", param="input")
    return messages


def _tools(req: ResponsesRequest) -> list[dict[str, Any]] | None:
    if not req.tools:
        return None
    out = []
    for i, tool in enumerate(req.tools):
        if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise RequestError(f"tools[{i}]: only function tools are supported (type 'function' with a name); "
                               f"hosted tools ({tool.get('type')!r}) run at OpenAI, not here", param="tools")
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise RequestError(f"tool_choice {json.dumps(choice)[:80]} is not supported (auto, none, required or a "
                       "function by name)", param="tool_choice")


def _response_format(req: ResponsesRequest) -> dict[str, Any] | None:
    fmt = req.text.format if req.text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.schema_ is None:
        raise RequestError("text.format of type json_schema needs a `schema`", param="text")
    schema: dict[str, Any] = {"name": fmt.name or "response", "schema": fmt.schema_}
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": schema}


def refuse_state(req: ResponsesRequest) -> None:
    """A 400 for a request that needs state kept at the server (kvfence serve keeps none)."""
    for name in STATE_FIELDS:
        if getattr(req, name) not in (None, False):
            raise RequestError(f"`{name}` needs conversation state kept at the server; this server keeps "
                               "none: send the whole conversation in `input`", param=name)
    if req.store:
        raise RequestError("`store: true` asks the server to keep the response; this server keeps none: "
                           "send `store: false` (or leave it out)", param="store")


def chat_request(req: ResponsesRequest) -> dict[str, Any]:
    """The chat completion request that asks the model the same thing (``stream`` included)."""
    body: dict[str, Any] = {"model": req.model, "messages": _messages(req)}
    tools = _tools(req)
    if tools is not None:
        body["tools"] = tools
    for key, value in (("tool_choice", _tool_choice(req.tool_choice)), ("parallel_tool_calls", req.parallel_tool_calls),
                       ("response_format", _response_format(req)), ("max_tokens", req.max_output_tokens),
                       ("temperature", req.temperature), ("top_p", req.top_p), ("cache_salt", req.cache_salt),
                       ("user", req.user or req.safety_identifier)):
        if value is not None:
            body[key] = value
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def new_response_id() -> str:
    return "resp_" + uuid.uuid4().hex


def _usage(chat_usage: Any) -> dict[str, Any]:
    usage = chat_usage if isinstance(chat_usage, dict) else {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}


def _skeleton(req: ResponsesRequest, response_id: str, created: int, model: str, status: str) -> dict[str, Any]:
    fmt: dict[str, Any] = {"type": "text"}
    if req.text is not None and req.text.format is not None:
        fmt = req.text.format.model_dump(by_alias=True, exclude_none=True)
    return {"id": response_id, "object": "response", "created_at": created, "status": status, "model": model,
            "output": [], "parallel_tool_calls": req.parallel_tool_calls is not False,
            "tool_choice": req.tool_choice or "auto", "tools": req.tools or [], "error": None,
            "incomplete_details": None, "instructions": req.instructions, "metadata": req.metadata or {},
            "temperature": req.temperature, "top_p": req.top_p, "max_output_tokens": req.max_output_tokens,
            "previous_response_id": None, "store": False, "text": {"format": fmt}, "truncation": "disabled",
            "user": req.user, "usage": None}


def _message_item(text: str, refusal: bool = False) -> dict[str, Any]:
    part = ({"type": "refusal", "refusal": text} if refusal
            else {"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    return {"type": "message", "id": "msg_" + uuid.uuid4().hex, "role": "assistant", "status": "completed",
            "content": [part]}


def _call_item(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    call_id = call.get("id") or "call_" + uuid.uuid4().hex[:24]
    return {"type": "function_call", "id": "fc_" + uuid.uuid4().hex, "call_id": call_id,
            "name": function.get("name") or "", "arguments": function.get("arguments") or "", "status": "completed"}


def response_from_chat(chat: dict[str, Any], req: ResponsesRequest, *, response_id: str | None = None) -> dict[str, Any]:
    """A whole chat completion (its first choice) as a Response object."""
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    body = _skeleton(req, response_id or new_response_id(), int(chat.get("created") or time.time()),
                     str(chat.get("model") or req.model), status)
    if status == "incomplete":
        body["incomplete_details"] = {"reason": "max_output_tokens"}
    output = []
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        output.append(_message_item(message["refusal"], refusal=True))
    if isinstance(message.get("content"), str) and (message["content"] or not message.get("tool_calls")):
        output.append(_message_item(message["content"]))
    output += [_call_item(c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    body["output"] = output
    body["usage"] = _usage(chat.get("usage"))
    return body


class ResponseEvents:
    """Chat completion chunks (decoded) in, the Responses event stream out (dicts with ``type`` and
    ``sequence_number``, in the order the OpenAI SDK's stream accumulator expects)."""

    def __init__(self, req: ResponsesRequest, *, response_id: str | None = None, model: str | None = None) -> None:
        self._req = req
        self._response = _skeleton(req, response_id or new_response_id(), int(time.time()), model or req.model,
                                   "in_progress")
        self._seq = 0
        self._started = False
        self._text: dict[str, Any] | None = None  # the open message item
        self._text_index = -1
        self._calls: dict[int, tuple[int, dict[str, Any]]] = {}  # chat tool-call index -> (output index, item)
        self._output: list[dict[str, Any]] = []
        self._finish: str | None = None
        self._usage: Any = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        snapshot = json.loads(json.dumps(self._response))
        return [self._event("response.created", response=snapshot),
                self._event("response.in_progress", response=snapshot)]

    def _close_text(self) -> list[dict[str, Any]]:
        item = self._text
        if item is None:
            return []
        self._text = None
        part = item["content"][0]
        item["status"] = "completed"
        common = {"item_id": item["id"], "output_index": self._text_index, "content_index": 0}
        return [self._event("response.output_text.done", **common, text=part["text"], logprobs=[]),
                self._event("response.content_part.done", **common, part=dict(part)),
                self._event("response.output_item.done", output_index=self._text_index, item=json.loads(json.dumps(item)))]

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        events = self.start()
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        if chunk.get("model"):
            self._response["model"] = chunk["model"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or int(choice.get("index") or 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self._text is None:
                    self._text = {"type": "message", "id": "msg_" + uuid.uuid4().hex, "role": "assistant",
                                  "status": "in_progress", "content": []}
                    self._text_index = len(self._output)
                    self._output.append(self._text)
                    events.append(self._event("response.output_item.added", output_index=self._text_index,
                                              item=json.loads(json.dumps(self._text))))
                    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                    self._text["content"].append(part)
                    events.append(self._event("response.content_part.added", item_id=self._text["id"],
                                              output_index=self._text_index, content_index=0, part=dict(part)))
                self._text["content"][0]["text"] += text
                events.append(self._event("response.output_text.delta", item_id=self._text["id"],
                                          output_index=self._text_index, content_index=0, delta=text, logprobs=[]))
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                events += self._close_text()
                index = int(call.get("index") or 0)
                function = call.get("function") or {}
                if index not in self._calls:
                    item = _call_item({"id": call.get("id"), "function": {"name": function.get("name")}})
                    item["status"] = "in_progress"
                    self._calls[index] = (len(self._output), item)
                    self._output.append(item)
                    events.append(self._event("response.output_item.added", output_index=len(self._output) - 1,
                                              item=dict(item)))
                at, item = self._calls[index]
                piece = function.get("arguments")
                if isinstance(piece, str) and piece:
                    item["arguments"] += piece
                    events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                              output_index=at, delta=piece))
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        return events

    def finish(self) -> list[dict[str, Any]]:
        """The closing events (every open item done, then ``response.completed`` / ``.incomplete``)."""
        events = [*self.start(), *self._close_text()]
        for at, item in self._calls.values():
            item["status"] = "completed"
            events.append(self._event("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                                      arguments=item["arguments"], name=item["name"]))
            events.append(self._event("response.output_item.done", output_index=at, item=dict(item)))
        self._calls = {}
        response = self._response
        response["output"] = self._output
        response["usage"] = _usage(self._usage)
        if self._finish == "length":
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": "max_output_tokens"}
            return [*events, self._event("response.incomplete", response=response)]
        response["status"] = "completed"
        return [*events, self._event("response.completed", response=response)]

    def error(self, message: str, code: str | None = None) -> dict[str, Any]:
        """The ``error`` event that ends a failed stream."""
        return self._event("error", code=code, message=message, param=None)
