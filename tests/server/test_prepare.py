"""Admission checks that need no engine (I3 at the edge), on plain data."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pytest

from kvfence.server.api_errors import APIError
from kvfence.server.auth.keys import ApiKey
from kvfence.server.openai.prepare import (
    LoadedModel,
    check_choices,
    resolve_model_name,
    sampling_params,
    tokenize_prompt,
)
from kvfence.server.openai.protocol import ChatCompletionRequest, CompletionRequest, parse_body


@dataclass
class _Capacity:
    max_model_len: int = 100
    num_pages: int = 20
    page_size: int = 16


class _Tokenizer:
    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [1, *text.encode()] if add_special_tokens else list(text.encode())


MODEL = LoadedModel("m", ("m", "alias"), _Tokenizer(), _Capacity(), True, 300)
KEY = ApiKey("acme", "w", "k", "0" * 64, max_prompt_tokens=10)


def _completion(**body: Any) -> CompletionRequest:
    return parse_body(json.dumps({"prompt": "x", **body}).encode(), CompletionRequest)


def _chat(**body: Any) -> ChatCompletionRequest:
    return parse_body(json.dumps({"messages": [{"role": "user", "content": "x"}], **body}).encode(),
                      ChatCompletionRequest)


def test_default_max_tokens() -> None:
    assert sampling_params(_completion(), 10, MODEL, None, "prompt").max_tokens == 16
    assert sampling_params(_completion(), 95, MODEL, None, "prompt").max_tokens == 5
    assert sampling_params(_chat(), 30, MODEL, None, "messages").max_tokens == 70


@pytest.mark.parametrize(("num_prompt", "max_tokens", "fits"), [(90, 10, True), (90, 11, False), (100, None, False),
                                                                 (99, None, True), (101, 1, False)])
def test_context_length_boundary(num_prompt: int, max_tokens: int | None, fits: bool) -> None:
    req = _completion(max_tokens=max_tokens)
    if fits:
        assert sampling_params(req, num_prompt, MODEL, None, "prompt").max_tokens + num_prompt <= 100
        return
    with pytest.raises(APIError) as info:
        sampling_params(req, num_prompt, MODEL, None, "prompt")
    assert info.value.code == "context_length_exceeded" and info.value.status_code == 400
    assert "100" in info.value.message


def test_key_prompt_limit_and_empty_prompt() -> None:
    assert sampling_params(_completion(), 10, MODEL, KEY, "prompt").max_tokens == 16
    with pytest.raises(APIError, match="allows at most 10"):
        sampling_params(_completion(), 11, MODEL, KEY, "prompt")
    with pytest.raises(APIError, match="at least one token"):
        sampling_params(_completion(), 0, MODEL, None, "prompt")


def test_fields_reach_the_sampling_params() -> None:
    p = sampling_params(_completion(temperature=0, top_k=-1, top_p=0.5, stop=["a"], seed=-1, logprobs=2,
                                    ignore_eos=True, min_tokens=1, max_tokens=4), 3, MODEL, None, "prompt")
    assert (p.temperature, p.top_k, p.top_p, p.stop, p.logprobs, p.ignore_eos, p.min_tokens) == \
        (0.0, None, 0.5, ["a"], 2, True, 1)
    assert p.seed is not None and p.seed >= 0
    c = sampling_params(_chat(logprobs=True, top_logprobs=3), 3, MODEL, None, "messages")
    assert c.logprobs == 3
    with pytest.raises(APIError) as info:
        sampling_params(_completion(min_tokens=9, max_tokens=2), 3, MODEL, None, "prompt")
    assert info.value.param == "min_tokens"


def test_model_names_and_token_ids() -> None:
    assert resolve_model_name(None, MODEL) == "m"
    assert resolve_model_name("alias", MODEL) == "alias"
    with pytest.raises(APIError) as info:
        resolve_model_name("gpt-4o", MODEL)
    assert info.value.code == "model_not_found" and info.value.status_code == 404
    assert tokenize_prompt("hi", MODEL) == [1, 104, 105]
    assert tokenize_prompt([5, 299], MODEL) == [5, 299]
    with pytest.raises(APIError, match="out of range"):
        tokenize_prompt([300], MODEL)


def test_sampling_fields_reach_the_engine_params() -> None:
    params = sampling_params(_completion(presence_penalty=0.5, frequency_penalty=-1, repetition_penalty=1.2,
                                         logit_bias={"7": -100}, min_p=0.1, n=3, best_of=4), 5, MODEL, None, "prompt")
    assert (params.presence_penalty, params.frequency_penalty, params.repetition_penalty) == (0.5, -1.0, 1.2)
    assert params.logit_bias == {7: -100.0} and params.min_p == 0.1
    assert (params.n, params.best_of, params.num_sequences) == (3, 4, 4)
    chat = sampling_params(_chat(n=2), 5, MODEL, None, "messages")
    assert chat.n == 2 and chat.best_of is None


def test_generation_config_defaults_fill_only_the_fields_a_request_leaves_out() -> None:
    model = dataclasses.replace(MODEL, sampling_defaults={"temperature": 0.6, "top_p": 0.9, "top_k": 20,
                                                          "min_p": 0.05, "repetition_penalty": 1.05})
    params = sampling_params(_chat(), 5, model, None, "messages")
    assert (params.temperature, params.top_p, params.top_k, params.min_p, params.repetition_penalty) == (
        0.6, 0.9, 20, 0.05, 1.05)
    explicit = sampling_params(_chat(temperature=0, top_p=1, top_k=-1, min_p=0, repetition_penalty=1), 5, model,
                               None, "messages")
    assert (explicit.temperature, explicit.top_p, explicit.top_k, explicit.min_p, explicit.repetition_penalty) == (
        0.0, 1.0, None, 0.0, 1.0)
    plain = sampling_params(_chat(), 5, MODEL, None, "messages")
    assert (plain.temperature, plain.top_p, plain.top_k, plain.min_p, plain.repetition_penalty) == (
        1.0, 1.0, None, 0.0, 1.0)


def test_logit_bias_ids_are_checked_against_the_vocabulary() -> None:
    with pytest.raises(APIError) as info:
        sampling_params(_completion(logit_bias={"300": 1}), 5, MODEL, None, "prompt")
    assert info.value.param == "logit_bias" and "300" in info.value.message
    sampling_params(_completion(logit_bias={"299": 1}), 5, MODEL, None, "prompt")


def test_choices_must_fit_the_pool_and_the_queue() -> None:
    # 20 pages of 16; 40-token prompt + 40 = 5 pages per choice, 2 of them shared prompt pages
    params = sampling_params(_completion(n=6, max_tokens=40), 40, MODEL, None, "prompt")
    check_choices([[1] * 40], [params], MODEL, shares_prefix=True, max_sequences=None)  # 5 + 5 * 3 = 20
    with pytest.raises(APIError) as info:
        check_choices([[1] * 40], [params], MODEL, shares_prefix=False, max_sequences=None)  # 30 pages
    assert info.value.param == "n" and info.value.code == "context_length_exceeded"
    with pytest.raises(APIError) as info:
        check_choices([[1] * 40], [params], MODEL, shares_prefix=True, max_sequences=5)
    assert info.value.param == "n" and "5" in info.value.message
    single = sampling_params(_completion(), 40, MODEL, None, "prompt")
    check_choices([[1] * 40], [single], MODEL, shares_prefix=False, max_sequences=0)  # one sequence: the queue decides
