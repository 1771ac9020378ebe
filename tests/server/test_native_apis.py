"""``/v1/responses`` and ``/v1/messages`` on the real server, called by the official clients.

Every answer and every stream event is validated against the SDK's own pydantic models; the new
endpoints keep the chat path's isolation: I3 (an over-length request is a 400 before anything is
scheduled) and I5 (the prefix-cache scope comes from the authenticated key, ``x-api-key`` included).
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.server.conftest import MAX_MODEL_LEN, RunningServer

RESPONSE_EVENT = TypeAdapter(ResponseStreamEvent)
MESSAGE_EVENT = TypeAdapter(RawMessageStreamEvent)
# an enum keeps the random model's grammar-constrained call short enough to finish within max_tokens
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"],
           "additionalProperties": False}


def _openai(server: RunningServer, who: str = "alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys[who], max_retries=0, timeout=60)


def _anthropic(server: RunningServer, who: str = "alice", key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key=key or server.keys[who], max_retries=0, timeout=60)


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def test_responses_whole_and_streamed_agree_and_validate(server: RunningServer) -> None:
    with _openai(server) as client:
        whole = client.responses.create(model=_model(server), instructions="Be terse.", input="Say hello.",
                                        max_output_tokens=8, temperature=0)
        raw = httpx.post(server.base_url + "/v1/responses", headers=server.headers("alice"),
                         json={"model": _model(server), "input": "Say hello.", "instructions": "Be terse.",
                               "max_output_tokens": 8, "temperature": 0}).json()
        Response.model_validate(raw)  # the wire body, strictly, not the SDK's lenient construct
        events = []
        with client.responses.stream(model=_model(server), instructions="Be terse.", input="Say hello.",
                                     max_output_tokens=8, temperature=0) as stream:
            for event in stream:
                events.append(event)
    final = events[-1].response  # cut by max_output_tokens: response.incomplete, as OpenAI ends it
    assert whole.output_text and whole.output_text == final.output_text
    assert whole.usage is not None and whole.usage.output_tokens == 8 and whole.status == "incomplete"
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.incomplete"
    assert "response.output_text.delta" in kinds and "response.output_text.done" in kinds
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    for event in events:
        RESPONSE_EVENT.validate_python(event.model_dump(mode="json", exclude_unset=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_function_call_whole_and_streamed(server: RunningServer) -> None:
    tools = [{"type": "function", "name": "weather", "parameters": WEATHER}]
    history = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
               {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'},
               {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
               {"role": "user", "content": "And in Rome?"}]
    with _openai(server) as client:
        whole = client.responses.create(model=_model(server), input=history, tools=tools,  # type: ignore[arg-type]
                                        tool_choice={"type": "function", "name": "weather"},
                                        max_output_tokens=40, temperature=0)
        with client.responses.stream(model=_model(server), input=history, tools=tools,  # type: ignore[arg-type]
                                     tool_choice={"type": "function", "name": "weather"},
                                     max_output_tokens=40, temperature=0) as stream:
            events = list(stream)
    calls = [o for o in whole.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "weather"
    streamed = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert streamed == calls[0].arguments
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and done[0].arguments == calls[0].arguments


@pytest.mark.parametrize("extra", [{"previous_response_id": "resp_123"}, {"store": True},
                                   {"background": True}])
def test_responses_state_is_refused(server: RunningServer, extra: dict[str, object]) -> None:
    with _openai(server) as client, pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=_model(server), input="hi", max_output_tokens=2, **extra)  # type: ignore[arg-type]
    assert next(iter(extra)) in str(caught.value)


def test_responses_unknown_field_and_hosted_tool_are_400(server: RunningServer) -> None:
    with _openai(server) as client:
        with pytest.raises(openai.BadRequestError, match="no_such_field"):
            client.responses.create(model=_model(server), input="hi", extra_body={"no_such_field": 1})
        with pytest.raises(openai.BadRequestError, match="hosted tools"):
            client.responses.create(model=_model(server), input="hi", tools=[{"type": "web_search"}])  # type: ignore[list-item]


def test_messages_whole_and_streamed_agree_and_validate(server: RunningServer) -> None:
    args = {"model": _model(server), "max_tokens": 8, "extra_body": {"temperature": 0.0}, "system": "Be terse.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]}
    with _anthropic(server) as client:
        whole = client.messages.create(**args)  # type: ignore[arg-type]
        events = []
        with client.messages.stream(**args) as stream:  # type: ignore[arg-type]
            for event in stream:
                events.append(event)
            final = stream.get_final_message()
    wire = {**{k: v for k, v in args.items() if k != "extra_body"}, "temperature": 0.0}
    raw = httpx.post(server.base_url + "/v1/messages", json=wire,
                     headers={"x-api-key": server.keys["alice"], "anthropic-version": "2023-06-01"}).json()
    Message.model_validate(raw)
    assert whole.content[0].type == "text" and whole.content[0].text
    assert final.content[0].type == "text" and final.content[0].text == whole.content[0].text
    assert whole.stop_reason == "max_tokens" == final.stop_reason and whole.usage.output_tokens == 8
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    for name in ("content_block_start", "content_block_delta", "content_block_stop", "message_delta"):
        assert name in kinds
    for event in events:
        if event.type in ("message_start", "content_block_start", "content_block_delta", "content_block_stop",
                          "message_delta", "message_stop"):
            MESSAGE_EVENT.validate_python(event.model_dump(mode="json", exclude_unset=True))


def test_messages_tool_use_whole_and_streamed(server: RunningServer) -> None:
    args = {"model": _model(server), "max_tokens": 40, "extra_body": {"temperature": 0.0},
            "tools": [{"name": "weather", "description": "the weather", "input_schema": WEATHER}],
            "tool_choice": {"type": "tool", "name": "weather"},
            "messages": [{"role": "user", "content": "Weather in Paris?"},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather",
                                                            "input": {"city": "Paris"}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                       "content": "sunny"},
                                                      {"type": "text", "text": "And Rome?"}]}]}
    with _anthropic(server) as client:
        whole = client.messages.create(**args)  # type: ignore[arg-type]
        with client.messages.stream(**args) as stream:  # type: ignore[arg-type]
            events = list(stream)
            final = stream.get_final_message()
    uses = [b for b in whole.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "weather" and isinstance(uses[0].input, dict)
    assert whole.stop_reason == "tool_use"
    assert any(e.type == "content_block_delta" and e.delta.type == "input_json_delta" for e in events)
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert streamed and streamed[0].input == uses[0].input


def test_messages_errors_are_anthropic_shaped(server: RunningServer) -> None:
    with _anthropic(server) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            # I3: prompt + max_tokens over the advertised context, refused before scheduling
            client.messages.create(model=_model(server), max_tokens=MAX_MODEL_LEN + 1,
                                   messages=[{"role": "user", "content": "hi"}])
        assert caught.value.body["type"] == "error"  # type: ignore[index]
        assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        with pytest.raises(anthropic.BadRequestError, match="image"):
            client.messages.create(model=_model(server), max_tokens=4, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    with _anthropic(server, key="sk-not-a-key") as client, pytest.raises(anthropic.AuthenticationError) as denied:
        client.messages.create(model=_model(server), max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_count_tokens_matches_the_prompt_served(server: RunningServer) -> None:
    messages = [{"role": "user", "content": "Count these words, please."}]
    with _anthropic(server) as client:
        counted = client.messages.count_tokens(model=_model(server), system="Be terse.", messages=messages)  # type: ignore[arg-type]
        served = client.messages.create(model=_model(server), system="Be terse.", max_tokens=1,
                                        messages=messages)  # type: ignore[arg-type]
    assert counted.input_tokens == served.usage.input_tokens + (served.usage.cache_read_input_tokens or 0) > 0


def test_prefix_cache_scope_comes_from_the_key(server: RunningServer) -> None:
    """I5 through both APIs: a prompt alice sent twice hits her cache; carol (another org) never hits it."""
    text = "The isolation contract of the prefix cache. " * 12
    with _openai(server, "alice") as client:
        client.responses.create(model=_model(server), input=text, max_output_tokens=1)
        again = client.responses.create(model=_model(server), input=text, max_output_tokens=1)
    assert again.usage is not None and again.usage.input_tokens_details.cached_tokens > 0
    with _anthropic(server, "carol") as client:
        foreign = client.messages.create(model=_model(server), max_tokens=1, messages=[{"role": "user",
                                                                                        "content": text}])
    assert foreign.usage.cache_read_input_tokens == 0
