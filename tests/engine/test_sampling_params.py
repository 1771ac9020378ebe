"""SamplingParams validates every field once and names the field in its error."""

from __future__ import annotations

from typing import Any

import pytest

from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import InvalidParameterError, RequestError


def test_defaults_are_valid_and_not_greedy() -> None:
    params = SamplingParams()
    assert params.max_tokens == 16
    assert params.stop == [] and params.stop_token_ids == []
    assert not params.is_greedy


def test_greedy_when_temperature_zero_or_top_k_one() -> None:
    assert SamplingParams(temperature=0).is_greedy
    assert SamplingParams(temperature=1e-9).is_greedy  # would overflow logits / temperature
    assert SamplingParams(temperature=0.7, top_k=1).is_greedy
    assert not SamplingParams(temperature=0.7, top_k=2).is_greedy


def test_lists_are_not_shared_between_instances() -> None:
    a, b = SamplingParams(), SamplingParams()
    a.stop.append("x")
    assert b.stop == []


def test_single_stop_string_is_accepted_as_a_list() -> None:
    assert SamplingParams(stop="\n\n").stop == ["\n\n"]  # type: ignore[arg-type]


def test_valid_edges() -> None:
    SamplingParams(max_tokens=1, temperature=0.0, top_k=1, top_p=1.0, logprobs=0, min_tokens=1)
    SamplingParams(top_p=1e-9, logprobs=20, seed=0, stop_token_ids=[0, 7], ignore_eos=True)
    SamplingParams(seed=2**64 - 1)
    SamplingParams(seed=-(2**63))


def test_penalty_bias_and_choice_edges() -> None:
    params = SamplingParams(presence_penalty=-2, frequency_penalty=2, repetition_penalty=0.01, min_p=1,
                            logit_bias={"17": 100, 3: -100}, n=128, best_of=128)
    assert params.logit_bias == {17: 100.0, 3: -100.0}  # OpenAI's string keys become token ids
    assert params.has_penalties and params.num_sequences == 128
    plain = SamplingParams()
    assert not plain.has_penalties and plain.num_sequences == 1 and plain.logit_bias == {}
    assert SamplingParams(n=3).num_sequences == 3
    assert SamplingParams(n=2, best_of=5).num_sequences == 5


def test_best_of_below_n_names_best_of() -> None:
    with pytest.raises(InvalidParameterError) as info:
        SamplingParams(n=3, best_of=2)
    assert info.value.param == "best_of" and "n=3" in str(info.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", -1),
        ("max_tokens", 1.5),
        ("max_tokens", "16"),
        ("max_tokens", True),
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("temperature", float("inf")),
        ("temperature", "hot"),
        ("top_p", 0),
        ("top_p", 0.0),
        ("top_p", 1.01),
        ("top_p", -0.5),
        ("top_k", 0),
        ("top_k", -1),
        ("top_k", 2.0),
        ("logprobs", 21),
        ("logprobs", -1),
        ("logprobs", 1.0),
        ("seed", 1.5),
        ("seed", "42"),
        ("seed", 2**64),
        ("seed", -(2**63) - 1),
        ("min_tokens", -1),
        ("min_tokens", 17),
        ("stop", [""]),
        ("stop", [1, 2]),
        ("stop_token_ids", [-3]),
        ("stop_token_ids", ["a"]),
        ("stop_token_ids", 5),
        ("ignore_eos", "yes"),
        ("presence_penalty", 2.01),
        ("presence_penalty", -2.5),
        ("presence_penalty", float("nan")),
        ("frequency_penalty", 3),
        ("frequency_penalty", "1"),
        ("repetition_penalty", 0),
        ("repetition_penalty", -1.0),
        ("repetition_penalty", float("inf")),
        ("logit_bias", {"5": 101}),
        ("logit_bias", {5: -100.5}),
        ("logit_bias", {"x": 1}),
        ("logit_bias", {-1: 1}),
        ("logit_bias", {1: float("nan")}),
        ("logit_bias", [1, 2]),
        ("min_p", -0.1),
        ("min_p", 1.5),
        ("n", 0),
        ("n", 129),
        ("n", 2.0),
        ("best_of", 0),
        ("best_of", 129),
    ],
)
def test_invalid_field_raises_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidParameterError) as info:
        SamplingParams(**{field: value})
    err = info.value
    assert isinstance(err, RequestError) and err.status_code == 400
    assert err.param == field
    assert field in str(err)
    assert repr(value) in str(err)
