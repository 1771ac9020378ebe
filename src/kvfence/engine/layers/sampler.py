"""Turn the last-position logits of a batch into tokens.

Order per row: logits processors, ``min_tokens`` bans, logit bias, repetition / frequency /
presence penalties (these four decide greedy picks and the returned log-probabilities), then,
for sampled rows, temperature, ``min_p``, ``top_k``, ``top_p`` and a draw from the row's generator.
"""

from __future__ import annotations

from typing import cast

import torch

from kvfence.engine.kernels import argmax_rows
from kvfence.engine.layers.penalties import apply_logit_bias, apply_penalties
from kvfence.engine.sampling.sample_rows import SampledToken, SampleRow

__all__ = ["SampleRow", "SampledToken", "inverse_cdf_draw", "sample"]


@torch.inference_mode()
def sample(logits: torch.Tensor, rows: list[SampleRow], default_generator: torch.Generator) -> list[SampledToken]:
    """Sample one token per row of ``logits`` [N, V] (float32)."""
    for i, row in enumerate(rows):
        for processor in row.params.logits_processors:
            logits[i] = processor(row.output_token_ids, logits[i])
        if row.num_generated < row.params.min_tokens and row.banned_until_min_tokens:
            logits[i, row.banned_until_min_tokens] = float("-inf")
    apply_logit_bias(logits, rows)
    apply_penalties(logits, rows)
    want_logprobs = any(row.params.logprobs is not None for row in rows)
    logprobs = torch.log_softmax(logits, dim=-1) if want_logprobs else None

    token_ids = argmax_rows(logits)
    sampled = [i for i, row in enumerate(rows) if not row.params.is_greedy]
    if sampled:
        draws = _sample_rows(logits, sampled, rows, default_generator)
        for i, token in zip(sampled, draws, strict=True):
            token_ids[i] = token

    out: list[SampledToken] = []
    for i, (row, token) in enumerate(zip(rows, token_ids, strict=True)):
        top: dict[int, float] | None = None
        if logprobs is not None and row.params.logprobs is not None:
            top = {token: float(logprobs[i, token])}
            if row.params.logprobs > 0:
                values, ids = logprobs[i].topk(row.params.logprobs)
                for tid, lp in zip(ids.tolist(), values.tolist(), strict=True):
                    top.setdefault(tid, lp)
        out.append(SampledToken(token, top))
    return out


def _sample_rows(
    logits: torch.Tensor, sampled: list[int], rows: list[SampleRow], default_generator: torch.Generator
) -> list[int]:
    """Draw one token for each row in ``sampled``: temperature, ``min_p``, ``top_k``, ``top_p``.

    The filters run once over all these rows; only the draw is per row, since each seeded row
    has its own generator (so its tokens do not depend on the batch), and the draws reach the
    host in one transfer. Rows without a filter get a neutral value (no ``top_k`` cut, ``top_p``
    above 1, ``min_p`` 0), so each row draws exactly what it would alone.
    """
    dev, vocab = logits.device, logits.shape[-1]
    params = [rows[i].params for i in sampled]
    x = logits.index_select(0, torch.tensor(sampled, dtype=torch.long, device=dev))
    x = x / torch.tensor([p.temperature for p in params], dtype=x.dtype, device=dev)[:, None]  # [S, V]
    if any(p.min_p > 0 for p in params):
        probs = x.softmax(dim=-1)
        floor = torch.tensor([p.min_p for p in params], dtype=x.dtype, device=dev)[:, None]
        x = x.masked_fill(probs < floor * probs.max(dim=-1, keepdim=True).values, float("-inf"))
    top_k = [p.top_k if p.top_k is not None and p.top_k < vocab else None for p in params]
    if any(k is not None for k in top_k):
        # k-th value by topk (cheap), then the mask: a later sort of a mostly -inf row is fast
        largest = x.topk(max(k for k in top_k if k is not None), dim=-1).values  # [S, max k]
        index = torch.tensor([(k or 1) - 1 for k in top_k], dtype=torch.long, device=dev)[:, None]
        unfiltered = torch.tensor([k is None for k in top_k], dtype=torch.bool, device=dev)[:, None]
        kth = largest.gather(1, index).masked_fill(unfiltered, float("-inf"))  # ties with it are kept
        x = x.masked_fill(x < kth, float("-inf"))
    if any(p.top_p < 1.0 for p in params):
        top_p = torch.tensor([p.top_p if p.top_p < 1.0 else 2.0 for p in params], dtype=x.dtype, device=dev)
        ordered, order = x.sort(dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        # drop a token when the mass before it already reaches top_p (always keeps the first)
        drop = (probs.cumsum(dim=-1) - probs) >= top_p[:, None]
        x = torch.empty_like(x).scatter_(1, order, ordered.masked_fill(drop, float("-inf")))
    uniforms = torch.cat([
        torch.rand(1, generator=cast(torch.Generator, rows[i].generator or default_generator), dtype=torch.float64,
                   device=dev)
        for i in sampled
    ])
    return inverse_cdf_draw(x.softmax(dim=-1), uniforms).tolist()  # one device sync for the batch


def inverse_cdf_draw(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Row ``r``'s token: the first index whose cumulative probability exceeds ``uniforms[r]`` of the total.

    ``probs`` [S, V], ``uniforms`` [S] in [0, 1). A token of probability 0 is never drawn (its
    cumulative sum equals its predecessor's). This replaces ``torch.multinomial``, which took about
    19 ms per row over a 49k vocabulary on a CPU core (a cumulative sum and a binary search: 0.3 ms).
    """
    cdf = probs.to(torch.float64).cumsum(dim=-1)
    targets = (uniforms.to(torch.float64) * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, targets, right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)
