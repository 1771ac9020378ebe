"""The pure translations of kvfence.apis, checked against the official SDKs' own models."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from kvfence.apis import embeddings, messages, responses
from kvfence.errors import RequestError

RESPONSE_EVENT = TypeAdapter(ResponseStreamEvent)
MESSAGE_EVENT = TypeAdapter(RawMessageStreamEvent)


def _chunks(text: str, arguments: str | None = None, finish: str = "stop") -> list[dict[str, Any]]:
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = [{**head, "choices": [{"index": 0, "delta": {"content": text[i:i + 3]}, "finish_reason": None}]}
           for i in range(0, len(text), 3)]
    if arguments is not None:
        out.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "send", "arguments": ""}}]},
            "finish_reason": None}]})
        out += [{**head, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": arguments[i:i + 4]}}]}, "finish_reason": None}]}
            for i in range(0, len(arguments), 4)]
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    out.append({**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}})
    return out


def test_responses_events_from_chat_chunks_validate_and_reassemble() -> None:
    req = responses.ResponsesRequest.parse({"model": "m", "input": "hi", "stream": True})
    events = responses.ResponseEvents(req)
    out = [e for chunk in _chunks("Hello there, friend.", '{"to": "a"}') for e in events.feed(chunk)]
    out += events.finish()
    for event in out:
        RESPONSE_EVENT.validate_python(event)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    final = Response.model_validate(out[-1]["response"])
    assert final.output_text == "Hello there, friend." and final.usage is not None
    assert final.usage.output_tokens == 9
    call = next(o for o in final.output if o.type == "function_call")
    assert json.loads(call.arguments) == {"to": "a"}


def test_message_events_from_chat_chunks_validate() -> None:
    req = messages.MessagesRequest.parse({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
    events = messages.MessageEvents(req)
    out = [e for chunk in _chunks("Hi.", '{"to": "a"}', finish="tool_calls") for e in events.feed(chunk)]
    out += events.finish()
    for name, event in out:
        assert name == event["type"]
        MESSAGE_EVENT.validate_python(event)
    assert out[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_chat_to_messages_and_back_keeps_the_conversation() -> None:
    chat = {"model": "m", "max_tokens": 20, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    ], "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
        "tool_choice": "required", "stop": "END"}
    native = messages.messages_request_from_chat(chat)
    req = messages.MessagesRequest.parse(native)  # the allowlist model takes what the translation writes
    assert native["system"] == "Be brief." and native["tool_choice"] == {"type": "any"}
    assert native["messages"][1]["content"][0] == {"type": "tool_use", "id": "call_1", "name": "weather",
                                                   "input": {"city": "Oslo"}}
    assert native["messages"][2]["content"][0]["type"] == "tool_result"
    back = messages.chat_request(req)
    assert [m["role"] for m in back["messages"]] == ["system", "user", "assistant", "tool"]
    assert json.loads(back["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    assert back["stop"] == ["END"] and back["tool_choice"] == "required"


def test_message_and_chat_answers_validate_both_ways() -> None:
    chat = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [
        {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}}
    req = messages.MessagesRequest.parse({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
    message = Message.model_validate(messages.message_from_chat(chat, req))
    assert message.stop_reason == "tool_use" and message.content[1].type == "tool_use"
    again = ChatCompletion.model_validate(messages.chat_from_message(message.model_dump(mode="json"), "m"))
    assert again.choices[0].message.content == "ok" and again.choices[0].finish_reason == "tool_calls"
    rreq = responses.ResponsesRequest.parse({"model": "m", "input": "x"})
    Response.model_validate(responses.response_from_chat(chat, rreq))


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "input": [[1, 2]]}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": "x", "extra": 1}, "extra"),
])
def test_embeddings_request_refusals(body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as caught:
        embeddings.EmbeddingsRequest.parse(body)
    assert caught.value.param == param


@pytest.mark.parametrize(("chat", "param"), [
    ({"logprobs": True}, "logprobs"), ({"n": 2}, "n"), ({"seed": 1}, "seed"), ({"temperature": 1.5}, "temperature"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
])
def test_chat_fields_without_a_messages_counterpart_are_refused(chat: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as caught:
        messages.messages_request_from_chat({"model": "m", "messages": [{"role": "user", "content": "x"}], **chat})
    assert caught.value.param == param


def test_anthropic_error_types() -> None:
    assert messages.anthropic_error(401, "no")["error"]["type"] == "authentication_error"
    assert messages.anthropic_error(429, "slow")["error"]["type"] == "rate_limit_error"
    assert messages.anthropic_error(502, "x")["error"]["type"] == "api_error"
