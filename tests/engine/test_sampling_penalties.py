"""Logit bias, penalties and min_p: exact semantics on synthetic logits, then through the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.engine.layers.penalties import apply_penalties, padded_ids
from kvfence.engine.layers.sampler import SampleRow, sample
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import InvalidParameterError

PROMPT = "Once upon a time"
V = 8


def _row(params: SamplingParams, outputs: list[int] = (), prompt: list[int] = ()) -> SampleRow:  # type: ignore[assignment]
    return SampleRow(params, None, len(outputs), [], list(outputs), list(prompt))


def _greedy_logprobs(logits: list[float], params: SamplingParams, outputs: list[int] = (),  # type: ignore[assignment]
                     prompt: list[int] = ()) -> dict[int, float]:  # type: ignore[assignment]
    row = torch.tensor([logits])
    tok = sample(row, [_row(params, outputs, prompt)], torch.Generator().manual_seed(0))[0]
    assert tok.logprobs is not None
    return tok.logprobs


_Spec = tuple[float, float, float, list[int], list[int]]  # (repetition, frequency, presence, prompt, output)


def _penalised(logits: torch.Tensor, specs: list[_Spec]) -> torch.Tensor:
    """What the engine's batched penalties make of ``logits`` (one row per spec)."""
    rows = [_row(SamplingParams(repetition_penalty=r, frequency_penalty=f, presence_penalty=p), o, pr)
            for r, f, p, pr, o in specs]
    got = logits.clone()
    apply_penalties(got, rows)
    return got


def _dense_reference(logits: torch.Tensor, specs: list[_Spec]) -> torch.Tensor:
    """The definitions, token by token: repetition over prompt and output, frequency/presence over the output."""
    expected = logits.clone()
    for i, (r, f, p, prompt, output) in enumerate(specs):
        for t in set(prompt) | set(output):
            x = float(expected[i, t])
            expected[i, t] = x / r if x > 0 else x * r
        for t in set(output):
            expected[i, t] -= f * output.count(t) + p
    return expected


def test_padded_ids() -> None:
    assert padded_ids([[1, 1, 3], [], [7]], V, torch.device("cpu")).tolist() == [[1, 1, 3], [V, V, V], [7, V, V]]
    assert padded_ids([[], []], V, torch.device("cpu")).tolist() == [[V], [V]]


_PENALTY = st.sampled_from([-2.0, -0.5, 0.0, 0.7, 2.0])
_IDS = st.lists(st.integers(0, 19), max_size=12)
_SPEC = st.tuples(st.sampled_from([0.3, 1.0, 1.5]), _PENALTY, _PENALTY, _IDS, _IDS)


@settings(max_examples=60, deadline=None)
@given(st.lists(_SPEC, min_size=1, max_size=5), st.integers(0, 2**31))
def test_penalties_match_the_definition(specs: list[_Spec],
                                        seed: int) -> None:
    logits = torch.randn(len(specs), 20, generator=torch.Generator().manual_seed(seed)) * 4
    assert torch.allclose(_penalised(logits, specs), _dense_reference(logits, specs), atol=1e-5)


def test_all_penalties_together_match_a_dense_reference() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=gen) * 3
    specs = [  # (repetition, frequency, presence, prompt, output)
        (1.7, 0.4, -0.3, [1, 2, 2, 9], [2, 5, 5, 5, 40]),
        (1.0, 0.0, 1.2, [], [0, 0, 49]),
        (0.5, -1.0, 0.0, [49, 3], []),
        (1.0, 0.0, 0.0, [4], [4]),  # no penalty: untouched
    ]
    assert torch.allclose(_penalised(logits, specs), _dense_reference(logits, specs), atol=1e-5)


def test_frequency_and_presence_follow_openai() -> None:
    logits = [1.0, 2.0, 3.0, 0.5, 0.0, 0.0, 0.0, 0.0]
    params = SamplingParams(temperature=0, frequency_penalty=0.5, presence_penalty=0.25, logprobs=V)
    # token 2 seen twice, token 1 once, token 5 in the prompt only (OpenAI: prompt does not count)
    got = _greedy_logprobs(logits, params, outputs=[2, 1, 2], prompt=[5, 5])
    expected = torch.tensor([1.0, 2.0 - 0.5 - 0.25, 3.0 - 1.0 - 0.25, 0.5, 0, 0, 0, 0]).log_softmax(-1)
    for token in range(V):
        assert got[token] == pytest.approx(float(expected[token]), abs=1e-6)
    assert next(iter(got)) == 2  # still the argmax (1.75 > 1.25)


def test_repetition_penalty_divides_positive_multiplies_negative_over_prompt_and_output() -> None:
    logits = [2.0, -1.0, 3.0, 4.0, -2.0, 0.0, 0.0, 0.0]
    params = SamplingParams(temperature=0, repetition_penalty=2.0, logprobs=V)
    got = _greedy_logprobs(logits, params, outputs=[3], prompt=[1, 0])
    expected = torch.tensor([1.0, -2.0, 3.0, 2.0, -2.0, 0.0, 0.0, 0.0]).log_softmax(-1)
    for token in range(V):
        assert got[token] == pytest.approx(float(expected[token]), abs=1e-6)
    assert next(iter(got)) == 2  # greedy is the argmax of the penalized logits: 3 lost to 2


def test_logit_bias_moves_the_greedy_pick_and_the_logprobs() -> None:
    logits = [0.0, 5.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    got = _greedy_logprobs(logits, SamplingParams(temperature=0, logit_bias={1: -100, 6: 3.5}, logprobs=2))
    assert list(got)[:1] == [2]
    base = torch.tensor([0.0, -95.0, 4.0, 0.0, 0.0, 0.0, 3.5, 0.0]).log_softmax(-1)
    assert got[2] == pytest.approx(float(base[2]), abs=1e-6)


def test_rows_are_penalized_independently_in_one_batch() -> None:
    logits = torch.tensor([[3.0, 2.0, 0.0, 0.0]] * 3)
    rows = [
        _row(SamplingParams(temperature=0, frequency_penalty=2.0), outputs=[0]),
        _row(SamplingParams(temperature=0)),
        _row(SamplingParams(temperature=0, logit_bias={1: 2.0})),
    ]
    tokens = sample(logits, rows, torch.Generator().manual_seed(0))
    assert [t.token_id for t in tokens] == [1, 0, 1]


def test_min_p_drops_unlikely_tokens() -> None:
    # probabilities ~ [0.64, 0.24, 0.09, 0.03]: min_p 0.3 keeps tokens 0 and 1 only
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    params = SamplingParams(temperature=1.0, min_p=0.3)
    gen = torch.Generator().manual_seed(0)
    drawn = {sample(logits.clone(), [SampleRow(params, gen, 0, [])], gen)[0].token_id for _ in range(300)}
    assert drawn == {0, 1}
    plain = SamplingParams(temperature=1.0)
    drawn_plain = {sample(logits.clone(), [SampleRow(plain, gen, 0, [])], gen)[0].token_id for _ in range(300)}
    assert {2, 3} & drawn_plain  # the filter, not the seed, removed them


# ---- through the engine ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm(default_model_dir: Path) -> LLM:
    return LLM(model=str(default_model_dir), kv_cache_tokens=4096, max_model_len="auto", device="cpu", cache_scope="request")


def _greedy(llm: LLM, n: int = 12, **extra: object) -> list[int]:
    params = SamplingParams(max_tokens=n, temperature=0, ignore_eos=True, **extra)  # type: ignore[arg-type]
    return llm.generate(PROMPT, params)[0].token_ids


def test_large_negative_bias_on_the_greedy_token_changes_the_answer(llm: LLM) -> None:
    greedy = _greedy(llm)
    biased = _greedy(llm, logit_bias={greedy[0]: -100})
    assert biased[0] != greedy[0]
    assert greedy[0] not in biased  # banned at every step, not only the first
    forced = _greedy(llm, logit_bias={65: 100})
    assert forced == [65] * 12


def _repeat_token(token: int, boost: float):  # type: ignore[no-untyped-def]
    """A logits processor that makes the model repeat ``token`` (a model that repeats itself)."""

    def processor(output_token_ids, logits):  # type: ignore[no-untyped-def]
        logits[token] = logits.max() + boost
        return logits

    return processor


def test_frequency_penalty_reduces_repeats_after_logits_processors(llm: LLM) -> None:
    repeating = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, logits_processors=[_repeat_token(70, 3.0)])
    assert llm.generate(PROMPT, repeating)[0].token_ids == [70] * 12
    penalized = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, frequency_penalty=2.0,
                               logits_processors=[_repeat_token(70, 3.0)])
    tokens = llm.generate(PROMPT, penalized)[0].token_ids
    # the boost of 3 beats 2 * count only while count <= 1: 70 twice, then others take over
    assert tokens[:2] == [70, 70] and tokens.count(70) < 12
    presence = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, presence_penalty=2.0,
                              logits_processors=[_repeat_token(70, 1.0)])
    assert llm.generate(PROMPT, presence)[0].token_ids.count(70) < 12


def test_repetition_penalty_counts_the_prompt(llm: LLM) -> None:
    prompt_ids = llm.tokenizer.encode(PROMPT)
    boosted = prompt_ids[-1]
    # the prompt's last token is boosted; a repetition penalty of 100 (it was in the prompt) beats the boost
    plain = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True, logits_processors=[_repeat_token(boosted, 0.5)])
    assert llm.generate([prompt_ids], plain)[0].token_ids[0] == boosted
    penalized = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True, repetition_penalty=100.0,
                               logits_processors=[_repeat_token(boosted, 0.5)])
    assert boosted not in llm.generate([prompt_ids], penalized)[0].token_ids


def test_penalties_keep_seeded_sampling_reproducible(llm: LLM) -> None:
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=7, ignore_eos=True, frequency_penalty=1.0,
                            presence_penalty=0.5, repetition_penalty=1.3, min_p=0.05, logit_bias={3: 2.0})
    first = llm.generate(PROMPT, params)[0].token_ids
    assert llm.generate([PROMPT, "x"], [params, SamplingParams(max_tokens=3)])[0].token_ids == first


def test_logit_bias_outside_the_vocabulary_is_refused(llm: LLM) -> None:
    vocab = llm.engine.model_config.vocab_size
    with pytest.raises(InvalidParameterError) as info:
        llm.generate(PROMPT, SamplingParams(logit_bias={vocab: 1.0}))
    assert info.value.param == "logit_bias" and str(vocab) in str(info.value)
    assert not llm.engine.has_unfinished_requests()
