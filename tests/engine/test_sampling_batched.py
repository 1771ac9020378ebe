"""The batched filters (temperature, min_p, top_k, top_p) draw exactly what one row at a time would."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.engine.layers.sampler import SampleRow, inverse_cdf_draw, sample
from kvfence.engine.sampling.sampling_params import SamplingParams


def _one_row(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """The reference: filters on a single row, as the sampler did before it was batched."""
    scaled = logits / params.temperature
    if params.min_p > 0:
        probs = scaled.softmax(dim=-1)
        scaled = scaled.masked_fill(probs < params.min_p * probs.max(), float("-inf"))
    if params.top_k is not None and params.top_k < scaled.shape[-1]:
        kth = scaled.topk(params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = scaled.sort(descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop = (probs.cumsum(dim=-1) - probs) >= params.top_p
        scaled = torch.empty_like(scaled).scatter_(0, order, sorted_logits.masked_fill(drop, float("-inf")))
    return _draw_one(scaled.softmax(dim=-1), float(torch.rand(1, generator=generator, dtype=torch.float64)))


def _draw_one(probs: torch.Tensor, u: float) -> int:
    """Inverse-CDF draw written out plainly: the first token whose running total exceeds u."""
    target, total = u * float(probs.double().sum()), 0.0
    for token, p in enumerate(probs.double().tolist()):
        total += p
        if total > target:
            return token
    return int(probs.shape[0] - 1)


_PARAMS = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.0, 0.3, 1.0, 1.7]),
    top_k=st.sampled_from([None, 1, 3, 40]),
    top_p=st.sampled_from([1.0, 0.9, 0.5, 0.05]),
    min_p=st.sampled_from([0.0, 0.05, 0.3]),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_PARAMS, min_size=1, max_size=6), st.integers(0, 2**31), st.integers(0, 1000))
def test_batched_rows_draw_what_single_rows_draw(params: list[SamplingParams], data_seed: int, seed: int) -> None:
    logits = torch.randn(len(params), 64, generator=torch.Generator().manual_seed(data_seed)) * 3
    logits[:, 7] = float("-inf")  # a banned token (min_tokens) stays banned through every filter
    rows = [SampleRow(p, torch.Generator().manual_seed(seed + i), 0, []) for i, p in enumerate(params)]
    got = [t.token_id for t in sample(logits.clone(), rows, torch.Generator().manual_seed(0))]
    expected = [
        int(logits[i].argmax()) if p.is_greedy else _one_row(logits[i], p, torch.Generator().manual_seed(seed + i))
        for i, p in enumerate(params)
    ]
    assert got == expected
    assert 7 not in got


def test_unseeded_rows_share_the_default_generator_in_row_order() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    params = SamplingParams(temperature=1.0, top_p=0.8)
    rows = [SampleRow(params, None, 0, []) for _ in range(3)]
    got = [t.token_id for t in sample(logits.clone(), rows, torch.Generator().manual_seed(5))]
    default = torch.Generator().manual_seed(5)
    assert got == [_one_row(logits[i], params, default) for i in range(3)]


def test_inverse_cdf_draw_follows_the_distribution_and_never_draws_a_zero() -> None:
    probs = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.3, 0.0])
    uniforms = torch.rand(20_000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    tokens = inverse_cdf_draw(probs.expand(len(uniforms), -1), uniforms)
    counts = torch.bincount(tokens, minlength=6).double() / len(uniforms)
    assert counts[[0, 2, 5]].sum() == 0
    assert torch.allclose(counts, probs.double(), atol=0.015)
    edges = inverse_cdf_draw(probs.expand(2, -1), torch.tensor([0.0, 1 - 2**-53], dtype=torch.float64))
    assert edges.tolist() == [1, 4]  # the first and last tokens with mass, not their zero neighbours
