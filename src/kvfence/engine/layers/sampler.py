"""Turn the last-position logits of a batch into tokens.

Order per row: logits processors, ``min_tokens`` bans, logit bias, repetition / frequency /
presence penalties (these four decide greedy picks and the returned log-probabilities), then,
for sampled rows, temperature, ``min_p``, ``top_k``, ``top_p`` and a draw from the row's generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvfence.engine.layers.penalties import apply_logit_bias, apply_penalties
from kvfence.engine.sampling_params import SamplingParams

__all__ = ["SampleRow", "SampledToken", "sample"]


@dataclass
class SampleRow:
    """What the sampler needs to know about one sequence of the batch."""

    params: SamplingParams
    generator: torch.Generator | None  # per-request when a seed was given (reproducible)
    num_generated: int
    banned_until_min_tokens: list[int]  # EOS / stop ids that may not end it before min_tokens
    output_token_ids: Sequence[int] = ()  # generated so far (logits processors, penalties)
    prompt_token_ids: Sequence[int] = ()  # the prompt (repetition penalty); may be empty when unused


@dataclass
class SampledToken:
    token_id: int
    logprobs: dict[int, float] | None  # chosen token first, then the top-n alternatives


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

    if all(row.params.is_greedy for row in rows):
        token_ids: list[int] = logits.argmax(dim=-1).tolist()
    else:
        token_ids = []
        greedy = logits.argmax(dim=-1).tolist()
        for i, row in enumerate(rows):
            if row.params.is_greedy:
                token_ids.append(greedy[i])
            else:
                token_ids.append(_sample_row(logits[i], row.params, row.generator or default_generator))

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


def _sample_row(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
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
        # drop a token when the mass before it already reaches top_p (always keeps the first)
        drop = (probs.cumsum(dim=-1) - probs) >= params.top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        scaled = torch.empty_like(scaled).scatter_(0, order, sorted_logits)
    probs = scaled.softmax(dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())
