"""Tool calls through the official ``openai`` client: ``tool_choice`` "required" and a named function.

Found: every request with ``tools`` was a 400, although vLLM serves "required" and named
functions without a tool parser (by a grammar) and agent frameworks send them. The model has random
weights, so a call that parses and validates does so because the grammar held; arguments are checked
by an independent validator (tests/engine/test_structured_schemas.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from kvfence.engine.runner.default_model import ensure_default_model
from tests.engine.test_structured_schemas import check_instance
from tests.server.conftest import RunningServer, engine_factory, serve

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6},
                                            "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -99, "maximum": 99},
                                        "b": {"$ref": "#/$defs/small"}},
       "required": ["a", "b"], "additionalProperties": False,
       "$defs": {"small": {"type": "integer", "minimum": 0, "maximum": 9}}}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "parameters": ADD}},
]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# The built-in model's token ids are its bytes: no whitespace between JSON tokens keeps answers short.
NO_WHITESPACE = {str(b): -100 for b in b" \t\n\r"}
NAMED = {"type": "function", "function": {"name": "add"}}


def _client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"], max_retries=0, timeout=120)


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def _create(server: RunningServer, client: openai.OpenAI | None = None, **kwargs: Any) -> Any:
    if client is None:
        with _client(server) as own:
            return _create(server, own, **kwargs)
    return client.chat.completions.create(  # type: ignore[call-overload]
        **{"model": _model(server), "messages": ASK, "tools": TOOLS, "max_tokens": 300, "temperature": 1.0,
           "logit_bias": NO_WHITESPACE, **kwargs})


def _streamed_calls(server: RunningServer, **kwargs: Any) -> tuple[dict[int, dict[int, dict[str, str]]], dict[int, str]]:
    """Choice index -> call index -> {id, name, arguments} reassembled from the deltas; finish reasons."""
    calls: dict[int, dict[int, dict[str, str]]] = {}
    finish: dict[int, str] = {}
    with _client(server) as client:
        chunks = list(_create(server, client, stream=True, **kwargs))
    for chunk in chunks:
        for choice in chunk.choices:
            assert not choice.delta.content, "a tool call's text must come as tool_calls, not content"
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(choice.index, {}).setdefault(delta.index, {"arguments": ""})
                if delta.id:
                    assert "id" not in entry, "a call's id comes once"
                    entry["id"] = delta.id
                    assert delta.type == "function" and delta.function is not None and delta.function.name
                    entry["name"] = delta.function.name
                if delta.function is not None and delta.function.arguments:
                    entry["arguments"] += delta.function.arguments
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    return calls, finish


def _check_call(call: Any, name: str | None = None) -> tuple[str, str]:
    assert call.type == "function" and call.id.startswith("call_") and len(call.id) > 10
    assert name is None or call.function.name == name
    check_instance(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return call.function.name, call.function.arguments


def test_a_named_function_is_called_with_valid_arguments_streamed_or_not(server: RunningServer) -> None:
    answer = _create(server, tool_choice=NAMED, seed=3)
    ChatCompletion.model_validate(answer.model_dump())
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"  # what OpenAI and vLLM answer for a forced function
    assert choice.message.content is None and len(choice.message.tool_calls) == 1
    arguments = _check_call(choice.message.tool_calls[0], "add")[1]
    calls, finish = _streamed_calls(server, tool_choice=NAMED, seed=3)
    assert finish == {0: "stop"}
    assert [(c["name"], c["arguments"]) for c in calls[0].values()] == [("add", arguments)]


def test_required_calls_validate_for_every_choice_streamed_or_not(server: RunningServer) -> None:
    answer = _create(server, tool_choice="required", n=2, seed=11)
    assert [c.index for c in answer.choices] == [0, 1]
    expected = {}
    for choice in answer.choices:
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert choice.message.tool_calls
        expected[choice.index] = [_check_call(call) for call in choice.message.tool_calls]
        assert len({call.id for call in choice.message.tool_calls}) == len(choice.message.tool_calls)
    calls, finish = _streamed_calls(server, tool_choice="required", n=2, seed=11)
    assert finish == {0: "tool_calls", 1: "tool_calls"}
    assert {i: [(c["name"], c["arguments"]) for c in by_index.values()] for i, by_index in calls.items()} == expected


def test_parallel_tool_calls_false_gives_exactly_one_call(server: RunningServer) -> None:
    answer = _create(server, tool_choice="required", parallel_tool_calls=False, n=2, seed=5)
    assert all(len(c.message.tool_calls) == 1 and c.finish_reason == "tool_calls" for c in answer.choices)


def test_a_required_list_cut_by_max_tokens_comes_back_as_text(server: RunningServer) -> None:
    choice = _create(server, tool_choice="required", max_tokens=3, seed=1).choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert choice.message.content.startswith("[")


def test_tool_choice_none_answers_text_with_the_tools_given(server: RunningServer) -> None:
    choice = _create(server, tool_choice="none", max_tokens=3, logit_bias=None).choices[0]
    assert choice.message.tool_calls is None and isinstance(choice.message.content, str)


def test_a_required_list_of_several_calls_becomes_several_calls() -> None:
    from kvfence.server.openai.protocol import ChatCompletionRequest
    from kvfence.server.openai.tools import answer_message, tool_calling

    req = ChatCompletionRequest.model_validate({"model": "m", "messages": ASK, "tools": TOOLS,
                                                "tool_choice": "required"})
    calling = tool_calling(req)
    assert calling is not None
    text = '[{"name": "add", "parameters": {"a": 1, "b": 2}}, {"name": "get_weather", "parameters": {"city": "Zürich"}}]'
    message, finish = answer_message(calling, text, "stop")
    assert finish == "tool_calls" and message["content"] is None
    calls = message["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("add", {"a": 1, "b": 2}), ("get_weather", {"city": "Zürich"})]
    assert "Zürich" in calls[1]["function"]["arguments"] and len({c["id"] for c in calls}) == 2
    assert answer_message(calling, text[:20], "length") == ({"role": "assistant", "content": text[:20]}, "length")


def test_the_tools_reach_the_chat_template() -> None:
    from kvfence.server.openai.protocol import ChatCompletionRequest

    req = ChatCompletionRequest.model_validate({"model": "m", "messages": ASK, "tools": TOOLS, "tool_choice": "none"})
    assert req.template_options()["template_kwargs"]["tools"] == TOOLS


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"tools": TOOLS}, "tool_choice", "auto"),  # vLLM without a tool parser: "auto" is refused
    ({"tools": TOOLS, "tool_choice": "auto"}, "tool_choice", "auto"),
    ({"tool_choice": "required"}, "tool_choice", "no tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "'nope'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice", "name"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "not supported"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}], "tool_choice": "required"}, "tools", "custom"),
    ({"tools": [{"type": "function"}], "tool_choice": "required"}, "tools", "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}], "tool_choice": "required"},
     "tools", "parameters"),
    ({"tools": [TOOLS[0], TOOLS[0]], "tool_choice": "required"}, "tools", "twice"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "only one"),
    ({"functions": [{"name": "f"}]}, "functions", "tools"),
    ({"function_call": {"name": "f"}}, "function_call", "tools"),
])
def test_tool_requests_that_cannot_be_served_are_clear_400s(server: RunningServer, fields: dict[str, Any],
                                                             param: str, words: str) -> None:
    body = {"model": _model(server), "messages": ASK, "max_tokens": 5, **fields}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=server.headers("alice"), timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and words in error["message"], error
    with _client(server) as client, pytest.raises(openai.BadRequestError):
        client.chat.completions.create(**body)


def test_a_template_that_renders_tools_gets_them_and_tokenize_counts_them_too(tmp_path: Path) -> None:
    """The tools reach the model's own template (Llama 3.1 / Qwen style: listed in the prompt), on
    /v1/chat/completions and on /tokenize alike, so the usage and the count agree."""
    model_dir = ensure_default_model(tmp_path / "model")
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = ("{% if tools %}{{ 'TOOLS: ' + (tools | tojson) + '<|eot_id|>' }}{% endif %}"
                               + config["chat_template"])
    config_path.write_text(json.dumps(config))
    with serve(tmp_path / "server", factory=engine_factory(model=str(model_dir))) as server:
        counts = []
        for tools in (None, TOOLS):
            body = {"model": _model(server), "messages": ASK, **({"tools": tools} if tools else {})}
            r = httpx.post(server.base_url + "/tokenize", json=body, headers=server.headers("alice"), timeout=60)
            assert r.status_code == 200, r.text
            counts.append(r.json()["count"])
            answer = _create(server, tool_choice="none", tools=tools or [], max_tokens=1, logit_bias=None)
            assert answer.usage.prompt_tokens == counts[-1]
        assert counts[1] > counts[0] + len(json.dumps(TOOLS)) // 2  # the tools' JSON is in the prompt
