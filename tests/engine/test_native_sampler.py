"""The native runtime's NumPy sampler draws what the torch sampler draws for the same uniform.

Each case runs both samplers on the same logits and parameters; the torch side draws its uniform
from a seeded ``torch.Generator`` and the NumPy side is handed that same uniform, so any difference
in the bans, biases, penalties, temperature, ``min_p``, ``top_k``, ``top_p`` or the inverse-CDF
draw shows as another token. Greedy picks and log-probabilities are compared too.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.engine.layers.sampler import sample as torch_sample
from kvfence.engine.native import sampler as native
from kvfence.engine.sampling.sample_rows import SampleRow
from kvfence.engine.sampling.sampling_params import SamplingParams

VOCAB = 50


class _Fixed(native.NumpyGenerator):
    """Hands out given uniforms (the ones the torch generator drew)."""

    def __init__(self, uniforms: list[float]) -> None:
        super().__init__(0)
        self._uniforms = list(uniforms)

    def uniform(self) -> float:
        return self._uniforms.pop(0)


_PARAMS = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.0, 0.3, 0.7, 1.0, 1.6]),
    top_k=st.sampled_from([None, 1, 3, 10, VOCAB + 5]),
    top_p=st.sampled_from([1.0, 0.95, 0.5, 0.1]),
    min_p=st.sampled_from([0.0, 0.05, 0.3]),
    repetition_penalty=st.sampled_from([1.0, 1.3, 0.8]),
    frequency_penalty=st.sampled_from([0.0, 0.5, -0.4]),
    presence_penalty=st.sampled_from([0.0, 0.7]),
    logit_bias=st.sampled_from([{}, {3: 5.0, 7: -100.0}]),
    min_tokens=st.sampled_from([0, 4]),
    logprobs=st.sampled_from([None, 0, 3]),
    max_tokens=st.just(16),
)


def _rows(params: list[SamplingParams], outputs: list[list[int]]) -> list[SampleRow]:
    return [
        SampleRow(p, None, len(out), [1, 2] if p.min_tokens else [], out, [5, 6, 6, 9])
        for p, out in zip(params, outputs, strict=True)
    ]


@settings(max_examples=150, deadline=None)
@given(
    params=st.lists(_PARAMS, min_size=1, max_size=4),
    seed=st.integers(0, 2**31 - 1),
    ties=st.booleans(),
)
def test_numpy_sampler_draws_the_torch_samplers_tokens(params: list[SamplingParams], seed: int, ties: bool) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, size=(len(params), VOCAB)).astype(np.float32)
    if ties:  # equal maxima: both pick the first (top_p's order among equals is torch's sort's own)
        logits[:, 10] = logits[:, 20] = logits.max() + 1
        params = [dataclasses.replace(p, top_p=1.0) for p in params]
    outputs = [rng.integers(0, VOCAB, size=int(rng.integers(0, 6))).tolist() for _ in params]
    gen = torch.Generator().manual_seed(seed)
    want = torch_sample(torch.from_numpy(logits.copy()), _rows(params, outputs), gen)
    # the uniforms the torch sampler drew, one per sampled row, in row order
    replay = torch.Generator().manual_seed(seed)
    uniforms = [float(torch.rand(1, generator=replay, dtype=torch.float64)) for p in params if not p.is_greedy]
    got = native.sample(logits.copy(), _rows(params, outputs), _Fixed(uniforms))
    assert [t.token_id for t in got] == [t.token_id for t in want]
    for g, w in zip(got, want, strict=True):
        assert (g.logprobs is None) == (w.logprobs is None)
        if w.logprobs is not None:
            assert next(iter(g.logprobs)) == next(iter(w.logprobs))  # the chosen token first
            assert g.logprobs.keys() == w.logprobs.keys() or ties
            for token, value in w.logprobs.items():
                if token in g.logprobs:
                    assert g.logprobs[token] == pytest.approx(value, abs=1e-5)


def test_a_seeded_request_draws_the_same_tokens_each_time_and_rewinds() -> None:
    logits = np.random.default_rng(0).normal(size=(1, VOCAB)).astype(np.float32)
    params = SamplingParams(temperature=1.0, max_tokens=4)

    def draws(generator: native.NumpyGenerator, n: int) -> list[int]:
        return [native.sample(logits.copy(), _rows([params], [[]]), generator)[0].token_id for _ in range(n)]

    first = draws(native.NumpyGenerator(7), 20)
    assert first == draws(native.NumpyGenerator(7), 20)
    assert first != draws(native.NumpyGenerator(8), 20)
    g = native.NumpyGenerator(7)
    draws(g, 5)
    state = g.get_state()
    after = draws(g, 5)
    g.set_state(state)
    assert draws(g, 5) == after == first[5:10]


def test_a_logits_processor_sees_a_numpy_row_and_decides() -> None:
    seen = []

    def only_token_11(output_ids: object, row: np.ndarray) -> np.ndarray:
        seen.append(type(row))
        row[:] = -np.inf
        row[11] = 0.0
        return row

    params = SamplingParams(temperature=0.9, max_tokens=4, logits_processors=[only_token_11])
    logits = np.zeros((1, VOCAB), dtype=np.float32)
    got = native.sample(logits, _rows([params], [[]]), native.NumpyGenerator(1))
    assert got[0].token_id == 11 and seen == [np.ndarray]


@settings(max_examples=100, deadline=None)
@given(params=_PARAMS, seed=st.integers(0, 2**31 - 1))
def test_penalties_and_biases_change_the_logits_as_the_torch_samplers_do(params: SamplingParams, seed: int) -> None:
    """Repeated output tokens (frequency counts each occurrence, presence once), the prompt (repetition)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, size=(1, 21)).astype(np.float32)
    outputs = [4, 4, 4, 8, 9, 9, 13]
    greedy = dataclasses.replace(params, temperature=0.0, logprobs=20)  # every logprob back
    want = torch_sample(torch.from_numpy(logits.copy()), _rows([greedy], [outputs]), torch.Generator())[0]
    got = native.sample(logits.copy(), _rows([greedy], [outputs]), native.NumpyGenerator(0))[0]
    assert got.token_id == want.token_id
    assert want.logprobs is not None and got.logprobs is not None
    for token, value in want.logprobs.items():
        assert got.logprobs[token] == pytest.approx(value, abs=1e-5), token
