"""Request validation at the edge: every malformed body is a 400 with OpenAI's error shape."""

from __future__ import annotations

import json

import pytest

from kvfence.server.api_errors import APIError
from kvfence.server.openai.protocol import ChatCompletionRequest, CompletionRequest, parse_body


def _err(body: bytes, model: type = CompletionRequest) -> APIError:
    with pytest.raises(APIError) as info:
        parse_body(body, model)
    assert info.value.status_code == 400
    payload = info.value.payload()["error"]
    assert set(payload) == {"message", "type", "param", "code"}
    return info.value


def test_valid_completion_request() -> None:
    req = parse_body(json.dumps({"model": "m", "prompt": "hi", "max_tokens": 5, "temperature": 0,
                                 "stop": "x", "stream": True, "stream_options": {"include_usage": True},
                                 "top_k": -1, "some_unknown_field": 1}).encode(), CompletionRequest)
    assert req.prompts() == ["hi"] and req.stop_list == ["x"] and req.include_usage
    assert req.effective_top_k is None


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("a", ["a"]), (["a", "b"], ["a", "b"]), ([1, 2], [[1, 2]]), ([[1], [2, 3]], [[1], [2, 3]])],
)
def test_prompt_shapes(prompt: object, expected: list) -> None:
    assert parse_body(json.dumps({"prompt": prompt}).encode(), CompletionRequest).prompts() == expected


@pytest.mark.parametrize("prompt", [None, [], [1, "a"], [[1], []], [-1], [True], {"a": 1}, [[1.5]]])
def test_bad_prompts(prompt: object) -> None:
    req = parse_body(json.dumps({"prompt": prompt}).encode(), CompletionRequest)
    with pytest.raises(APIError) as info:
        req.prompts()
    assert info.value.param == "prompt"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (b"{not json", None, "invalid_json"),
        (b"\xff\xfe{}", None, "invalid_encoding"),
        (b"[1, 2]", None, "invalid_json"),
        (b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None, "invalid_json"),
        (b'{"prompt": "x", "temperature": NaN}', "temperature", None),
        (b'{"prompt": "x", "max_tokens": "5"}', "max_tokens", None),
        (b'{"prompt": "x", "max_tokens": true}', "max_tokens", None),
        (b'{"prompt": "x", "max_tokens": 0}', "max_tokens", None),
        (b'{"prompt": "x", "temperature": -0.5}', "temperature", None),
        (b'{"prompt": "x", "temperature": 2.5}', "temperature", None),
        (b'{"prompt": "x", "top_p": 0}', "top_p", None),
        (b'{"prompt": "x", "top_p": 1.5}', "top_p", None),
        (b'{"prompt": "x", "n": 200}', "n", None),
        (b'{"prompt": "x", "n": 3, "best_of": 2}', "best_of", None),
        (b'{"prompt": "x", "best_of": 3, "stream": true}', "best_of", None),
        (b'{"prompt": "x", "logprobs": 21}', "logprobs", None),
        (b'{"prompt": "x", "stream": "yes"}', "stream", None),
        (b'{"prompt": "x", "stream_options": {"include_usage": true}}', "stream_options", None),
        (b'{"prompt": "x", "stop": ["a", ""]}', "stop", None),
        (b'{"prompt": "x", "presence_penalty": 2.1}', "presence_penalty", None),
        (b'{"prompt": "x", "repetition_penalty": -1}', "repetition_penalty", None),
        (b'{"prompt": "x", "logit_bias": {"1": "x"}}', "logit_bias", None),
        (b'{"prompt": "x", "min_p": -0.5}', "min_p", None),
        (b'{"prompt": "x", "max_completion_tokens": 0}', "max_completion_tokens", None),
        (b'{"prompt": "x", "max_tokens": -1, "echo": true}', "max_tokens", None),
        (b'{"prompt": "x", "suffix": "s"}', "suffix", None),
        (b'{"prompt": "x", "prompt_logprobs": -1}', "prompt_logprobs", None),
        (b'{"prompt": "x", "prompt_logprobs": 21}', "prompt_logprobs", None),
        (b'{"prompt": "x", "prompt_logprobs": true}', "prompt_logprobs", None),
        (b'{"prompt": "x", "prompt_logprobs": "1"}', "prompt_logprobs", None),
        (b'{"prompt": "x", "use_beam_search": true}', "use_beam_search", None),
        (b'{"prompt": "x", "allowed_token_ids": [1, 2]}', "allowed_token_ids", None),
        (b'{"prompt": "x", "bad_words": ["x"]}', "bad_words", None),
        (b'{"prompt": "x", "truncate_prompt_tokens": 5}', "truncate_prompt_tokens", None),
        (b'{"prompt": "x", "top_k": -5}', "top_k", None),
    ],
)
def test_bad_completion_bodies(body: bytes, param: str | None, code: str | None) -> None:
    err = _err(body)
    assert err.param == param
    if code is not None:
        assert err.code == code


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ("hello", "messages"),
        ([{"role": "wizard", "content": "x"}], "messages"),
        ([{"content": "x"}], "messages"),
    ],
)
def test_bad_chat_bodies(messages: object, param: str) -> None:
    err = _err(json.dumps({"messages": messages}).encode(), ChatCompletionRequest)
    assert err.param == param


def test_chat_text_parts_and_refused_images() -> None:
    req = parse_body(json.dumps({"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ], "max_completion_tokens": 3, "logprobs": True, "top_logprobs": 2}).encode(), ChatCompletionRequest)
    # joined by newlines for a template that prints the content (as vLLM), the list as sent for one that iterates
    assert req.template_messages() == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a\nb"}]
    assert req.template_messages("openai")[1] == {
        "role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert req.requested_max_tokens == 3
    req = parse_body(json.dumps({"messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}).encode(),
        ChatCompletionRequest)
    with pytest.raises(APIError, match="only parts of type 'text'"):
        req.template_messages()
    _err(json.dumps({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}).encode(),
         ChatCompletionRequest)


def test_explicit_nulls_mean_defaults() -> None:
    body = {"prompt": "x", "n": None, "stream": None, "max_tokens": None, "temperature": None, "top_p": None,
            "stop": None, "seed": None, "logprobs": None, "echo": None, "ignore_eos": None, "min_tokens": None,
            "stream_options": None, "user": None, "presence_penalty": None, "frequency_penalty": None,
            "repetition_penalty": None, "logit_bias": None, "min_p": None, "best_of": None, "prompt_logprobs": None,
            "use_beam_search": False, "allowed_token_ids": [], "bad_words": [], "truncate_prompt_tokens": None}
    req = parse_body(json.dumps(body).encode(), CompletionRequest)
    assert req.prompts() == ["x"] and not req.stream and req.requested_max_tokens is None
    chat = parse_body(json.dumps({"messages": [{"role": "user", "content": None}], "logprobs": None,
                                  "n": 1}).encode(), ChatCompletionRequest)
    assert chat.template_messages() == [{"role": "user", "content": ""}]


def test_seed_range() -> None:
    assert parse_body(b'{"prompt": "x", "seed": -5}', CompletionRequest).seed == -5
    _err(b'{"prompt": "x", "seed": 99999999999999999999999}')


def test_lone_surrogate_escapes_are_a_400_paired_ones_are_text() -> None:
    paired = parse_body(b'{"prompt": "party \\ud83c\\udf89"}', CompletionRequest)
    assert paired.prompt == "party 🎉"
    for body in (b'{"prompt": "a\\ud83c b"}', b'{"prompt": ["ok", "x\\uDC00"]}', b'{"prompt": "x", "stop": ["\\ud800"]}'):
        with pytest.raises(APIError) as err:
            parse_body(body, CompletionRequest)
        assert err.value.status_code == 400 and err.value.code == "invalid_encoding"


def test_tool_calls_of_earlier_turns_reach_the_template() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    req = parse_body(json.dumps({"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]}).encode(), ChatCompletionRequest)
    assistant, tool = req.template_messages()[1:]
    assert assistant["tool_calls"][0]["function"] == {"name": "weather", "arguments": {"city": "Oslo"}}
    assert tool == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}
    bad = {**call, "function": {"name": "weather", "arguments": "{not json"}}
    req = parse_body(json.dumps({"messages": [{"role": "assistant", "tool_calls": [bad]}]}).encode(),
                     ChatCompletionRequest)
    with pytest.raises(APIError, match="arguments"):
        req.template_messages()
