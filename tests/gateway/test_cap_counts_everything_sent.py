"""The length cap counts every part of a request that reaches the model: an uncounted field would be
a way to send a prompt longer than the backend holds (DESIGN.md I3 at the gateway)."""

from __future__ import annotations

import json

from kvfence.gateway.admission.caps import prompt_sizes, tool_schemas
from kvfence.gateway.admission.tokens import ApproximateCounter

COUNTER = ApproximateCounter()
BIG = "lorem ipsum dolor " * 300  # about 1,800 approximate tokens


def test_completions_suffix_is_counted_with_every_prompt() -> None:
    base = prompt_sizes(COUNTER, "completions", {"prompt": "def f():"})[0]
    with_suffix = prompt_sizes(COUNTER, "completions", {"prompt": "def f():", "suffix": BIG})[0]
    assert with_suffix == base + COUNTER.count_text(BIG)
    batch = prompt_sizes(COUNTER, "completions", {"prompt": ["a", [1, 2, 3]], "suffix": BIG})
    assert batch == [COUNTER.count_text("a") + COUNTER.count_text(BIG), 3 + COUNTER.count_text(BIG)]


def test_legacy_functions_and_function_call_are_counted() -> None:
    messages = [{"role": "user", "content": "hi"}]
    base = prompt_sizes(COUNTER, "chat", {"messages": messages})[0]
    functions = [{"name": "lookup", "description": BIG, "parameters": {"type": "object"}}]
    assert prompt_sizes(COUNTER, "chat", {"messages": messages, "functions": functions})[0] \
        >= base + COUNTER.count_text(BIG)
    called = [*messages, {"role": "assistant", "content": None,
                          "function_call": {"name": "lookup", "arguments": json.dumps({"q": BIG})}}]
    assert prompt_sizes(COUNTER, "chat", {"messages": called})[0] >= base + COUNTER.count_text(BIG)


def test_tool_schemas_joins_tools_and_functions() -> None:
    tool = {"type": "function", "function": {"name": "a"}}
    assert tool_schemas({"tools": [tool]}) == [tool]
    assert tool_schemas({"tools": [tool], "functions": [{"name": "b"}]}) == [tool, {"name": "b"}]
    assert tool_schemas({}) is None and tool_schemas({"tools": "x"}) is None
