"""Tool calls on chat (``tools`` + ``tool_choice``), served as vLLM serves them without a tool parser.

A call the client asks for is made by constraining the answer with a grammar (structured outputs),
so it always parses; nothing model-specific reads free text for calls:

- ``tool_choice: {"type": "function", "function": {"name": N}}``: the answer is JSON valid against
  N's ``parameters``; it comes back as one call of N (``finish_reason`` as the engine's: ``stop``,
  which is what OpenAI and vLLM answer for a forced function);
- ``tool_choice: "required"``: the answer is a JSON list of ``{"name", "parameters"}`` objects, one
  or more (exactly one with ``parallel_tool_calls: false``), each naming a tool and valid against
  its schema; it comes back as those calls with ``finish_reason: "tool_calls"``;
- ``tool_choice: "none"``: a text answer; the tools still reach the chat template (vLLM's default);
- ``tool_choice: "auto"`` (the default when ``tools`` is sent): deciding between text and a call
  needs a model-specific parser of the model's own call syntax, which this server does not have:
  a 400, as vLLM answers without ``--enable-auto-tool-choice``.

An answer cut by ``max_tokens`` before its JSON is complete is returned as text with
``finish_reason: "length"`` for ``required`` (there is no list to read calls from); a named call
keeps the cut arguments, as vLLM does.
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass
from typing import Any

from kvfence.engine.structured import GrammarSpec
from kvfence.errors import InvalidParameterError
from kvfence.server.api_errors import APIError

__all__ = [
    "ToolCallStream",
    "ToolCalling",
    "ToolMode",
    "answer_message",
    "new_tool_call_id",
    "tool_calling",
    "tool_calls_from_text",
]


class ToolMode(enum.Enum):
    NAMED = "named"
    REQUIRED = "required"


@dataclass(frozen=True)
class ToolCalling:
    """What a request that must call a tool needs: how to read the answer, and the grammar."""

    mode: ToolMode
    spec: GrammarSpec
    name: str | None = None  # NAMED: the function called

    @property
    def finish_reason(self) -> str:
        """The ``finish_reason`` of a complete answer (the engine said ``stop``)."""
        return "tool_calls" if self.mode is ToolMode.REQUIRED else "stop"


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _bad(message: str, param: str = "tools") -> APIError:
    return APIError.bad_request(message, param=param)


def _functions(tools: list[Any]) -> dict[str, dict[str, Any]]:
    """Tool name -> its JSON schema of parameters; every malformed entry is a 400 naming ``tools``."""
    found: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _bad(f"tools[{i}] must be an object")
        if tool.get("type", "function") != "function":
            raise _bad(f"tools[{i}]: tool type {tool.get('type')!r} is not supported; only 'function' tools are")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise _bad(f"tools[{i}].function must be an object with a 'name'")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"tools[{i}].function.name must be a non-empty string")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise _bad(f"tools[{i}].function.parameters must be a JSON schema object")
        if name in found:
            raise _bad(f"tools: the function name {name!r} is given twice")
        found[name] = parameters
    return found


def _checked_schema(schema: dict[str, Any], param: str) -> GrammarSpec:
    try:
        return GrammarSpec.json_schema(schema)
    except InvalidParameterError as exc:
        raise _bad(f"{param}: {exc.message}", param) from exc


def _required_schema(functions: dict[str, dict[str, Any]], single: bool) -> dict[str, Any]:
    """A JSON list of calls, each ``{"name": one tool, "parameters": valid for that tool}``.

    Each tool's ``$defs`` move to the top, where its ``#/$defs/...`` references point once the
    schema sits inside the list; two tools defining one name differently are a 400.
    """
    defs: dict[str, Any] = {}
    options = []
    for name, parameters in functions.items():
        own = dict(parameters)
        for key in ("$defs", "definitions"):
            for def_name, definition in (own.pop(key, None) or {}).items():
                if defs.setdefault(def_name, definition) != definition:
                    raise _bad(f"tools: two tools define {def_name!r} differently in their $defs")
        options.append({"type": "object", "properties": {"name": {"type": "string", "enum": [name]},
                                                         "parameters": own},
                        "required": ["name", "parameters"], "additionalProperties": False})
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": options}}
    if single:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def tool_calling(req: Any) -> ToolCalling | None:
    """The call a chat request asks for, or None for a text answer; every refusal is a 400.

    ``tool_choice`` "none" (or left out) without tools is a text answer, as before tools were served.
    """
    tools = req.tools or []
    choice = req.tool_choice
    if choice is None:
        choice = "auto" if tools else "none"
    functions = _functions(tools)
    if choice == "none":
        return None
    if choice == "auto":
        if not tools:
            return None
        raise _bad('tool_choice "auto" (the default when tools are sent) needs a parser of the model\'s own '
                   'tool-call syntax, which this server does not have: send tool_choice "required", a named '
                   'function ({"type": "function", "function": {"name": ...}}) or "none"', "tool_choice")
    if not tools:
        raise _bad("tool_choice asks for a tool call but no tools were sent", "tool_choice")
    if choice == "required":
        single = req.parallel_tool_calls is False
        return ToolCalling(ToolMode.REQUIRED, _checked_schema(_required_schema(functions, single), "tools"))
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        if not isinstance(name, str) or not name:
            raise _bad("tool_choice.function.name must be a non-empty string", "tool_choice")
        if name not in functions:
            raise _bad(f"tool_choice names the function {name!r}, which is not among the tools sent "
                       f"({', '.join(sorted(functions))})", "tool_choice")
        return ToolCalling(ToolMode.NAMED, _checked_schema(functions[name], f"tools ({name})"), name)
    raise _bad(f"tool_choice {json.dumps(choice)[:80]} is not supported; send \"none\", \"required\" or "
               '{"type": "function", "function": {"name": ...}}', "tool_choice")


def tool_calls_from_text(calling: ToolCalling, text: str) -> list[dict[str, Any]] | None:
    """The ``tool_calls`` of a finished answer, or None when there are none to read (a ``required``
    list cut short by ``max_tokens``)."""
    if calling.mode is ToolMode.NAMED:
        assert calling.name is not None
        return [_call(calling.name, text)]
    try:
        items = json.loads(text)
    except ValueError:
        return None
    if not isinstance(items, list) or not all(isinstance(i, dict) and "name" in i for i in items):
        return None
    return [_call(str(i["name"]), json.dumps(i.get("parameters", {}), ensure_ascii=False)) for i in items]


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": new_tool_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def answer_message(calling: ToolCalling, text: str, finish_reason: str | None) -> tuple[dict[str, Any], str | None]:
    """The non-streamed ``message`` and ``finish_reason`` of one choice of a tool-calling request."""
    calls = tool_calls_from_text(calling, text) if finish_reason != "abort" else None
    if calls is None:
        return {"role": "assistant", "content": text}, finish_reason
    return ({"role": "assistant", "content": None, "tool_calls": calls},
            calling.finish_reason if finish_reason == "stop" else finish_reason)


class ToolCallStream:
    """One streamed choice of a tool-calling request: text deltas in, ``delta`` objects out.

    A named call streams its arguments as they are generated (the first delta carries the call's
    id, type and name, as OpenAI's stream does); a ``required`` list is sent once complete, one
    ``tool_calls`` entry per call, since a call's name is known only once its object is read.
    """

    def __init__(self, calling: ToolCalling) -> None:
        self.calling = calling
        self.text = ""
        self._call_id: str | None = None

    def delta(self, piece: str) -> dict[str, Any] | None:
        """The delta for newly generated text (None: nothing to send yet)."""
        self.text += piece
        if self.calling.mode is ToolMode.REQUIRED or not piece:
            return None
        return {"tool_calls": [self._named_entry(piece)]}

    def _named_entry(self, arguments: str) -> dict[str, Any]:
        if self._call_id is None:
            self._call_id = new_tool_call_id()
            return {"index": 0, "id": self._call_id, "type": "function",
                    "function": {"name": self.calling.name, "arguments": arguments}}
        return {"index": 0, "function": {"arguments": arguments}}

    def finish(self, finish_reason: str | None) -> tuple[dict[str, Any] | None, str | None]:
        """The last delta before the finishing chunk (None: none needed) and the finish reason."""
        if self.calling.mode is ToolMode.NAMED:
            last = {"tool_calls": [self._named_entry("")]} if self._call_id is None else None
            return last, finish_reason
        calls = tool_calls_from_text(self.calling, self.text) if finish_reason != "abort" else None
        if calls is None:
            return ({"content": self.text} if self.text else None), finish_reason
        entries = [{"index": i, **call} for i, call in enumerate(calls)]
        return {"tool_calls": entries}, (self.calling.finish_reason if finish_reason == "stop" else finish_reason)
