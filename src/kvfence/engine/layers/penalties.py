"""Logit biases and repetition / frequency / presence penalties, batched over the rows that use them.

Both change the logits in place before greedy selection and before log-probabilities are taken,
so a greedy row with a penalty picks the argmax of the penalized logits. Token counts come from
one ``scatter_add_`` over a padded ``[rows, longest]`` tensor of token ids (the padding goes to a
spare column that is dropped), not from a Python loop per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from kvfence.engine.sampling_params import SamplingParams

__all__ = ["PenaltyRow", "apply_logit_bias", "apply_penalties", "token_counts"]


class PenaltyRow(Protocol):
    """What the penalties read from one row of the batch (``SampleRow`` has these)."""

    params: SamplingParams
    output_token_ids: Sequence[int]
    prompt_token_ids: Sequence[int]


def token_counts(token_lists: list[Sequence[int]], vocab_size: int, device: torch.device) -> torch.Tensor:
    """``[len(token_lists), vocab_size]`` float32: how often each token id occurs in each list."""
    longest = max((len(ids) for ids in token_lists), default=0)
    counts = torch.zeros(len(token_lists), vocab_size + 1, dtype=torch.float32, device=device)
    if longest == 0:
        return counts[:, :vocab_size]
    padded = [list(ids) + [vocab_size] * (longest - len(ids)) for ids in token_lists]
    index = torch.tensor(padded, dtype=torch.long, device=device)  # [M, L]
    counts.scatter_add_(1, index, torch.ones(index.shape, dtype=torch.float32, device=device))
    return counts[:, :vocab_size]


def apply_logit_bias(logits: torch.Tensor, rows: Sequence[PenaltyRow]) -> None:
    """Add each row's ``logit_bias`` to ``logits`` [N, V] in place (one indexed add for the batch)."""
    row_index: list[int] = []
    token_index: list[int] = []
    values: list[float] = []
    for i, row in enumerate(rows):
        for token_id, bias in row.params.logit_bias.items():
            row_index.append(i)
            token_index.append(token_id)
            values.append(bias)
    if not values:
        return
    dev = logits.device
    logits.index_put_(
        (torch.tensor(row_index, device=dev), torch.tensor(token_index, device=dev)),
        torch.tensor(values, dtype=logits.dtype, device=dev),
        accumulate=True,
    )


def apply_penalties(logits: torch.Tensor, rows: Sequence[PenaltyRow]) -> None:
    """Apply repetition, then frequency and presence penalties to ``logits`` [N, V] in place.

    Repetition (HF/vLLM): tokens seen in the prompt or the output so far have a positive logit
    divided by the penalty and a negative one multiplied. Frequency and presence (OpenAI): over
    the output so far, ``logit -= frequency * count + presence * (count > 0)``.
    """
    selected = [i for i, row in enumerate(rows) if row.params.has_penalties]
    if not selected:
        return
    dev, vocab = logits.device, logits.shape[-1]
    index = torch.tensor(selected, dtype=torch.long, device=dev)
    sub = logits.index_select(0, index)  # [M, V]
    params = [rows[i].params for i in selected]
    counts = token_counts([rows[i].output_token_ids for i in selected], vocab, dev)
    repetition = [p.repetition_penalty for p in params]
    if any(r != 1.0 for r in repetition):
        seen = (counts > 0) | (token_counts([rows[i].prompt_token_ids for i in selected], vocab, dev) > 0)
        penalty = torch.tensor(repetition, dtype=sub.dtype, device=dev)[:, None].expand_as(sub)
        penalty = torch.where(seen, penalty, torch.ones_like(penalty))
        sub = torch.where(sub > 0, sub / penalty, sub * penalty)
    frequency = torch.tensor([p.frequency_penalty for p in params], dtype=sub.dtype, device=dev)[:, None]
    presence = torch.tensor([p.presence_penalty for p in params], dtype=sub.dtype, device=dev)[:, None]
    sub = sub - frequency * counts - presence * (counts > 0).to(sub.dtype)
    logits.index_copy_(0, index, sub)
