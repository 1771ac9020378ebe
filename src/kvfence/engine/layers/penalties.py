"""Logit biases and repetition / frequency / presence penalties, batched over the rows that use them.

Both change the logits in place before greedy selection and before log-probabilities are taken,
so a greedy row with a penalty picks the argmax of the penalized logits.

Penalties touch only the tokens a row has seen, so they work on padded ``[rows, tokens]`` id
tensors (gather, then scatter back) rather than dense ``[rows, vocab]`` count tables: the cost
grows with the tokens seen, not with the vocabulary. Padding points at a spare column past the
vocabulary that is dropped at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from kvfence.engine.sampling.sampling_params import SamplingParams

__all__ = ["PenaltyRow", "apply_logit_bias", "apply_penalties", "padded_ids"]


class PenaltyRow(Protocol):
    """What the penalties read from one row of the batch (``SampleRow`` has these)."""

    params: SamplingParams
    output_token_ids: Sequence[int]
    prompt_token_ids: Sequence[int]


def padded_ids(token_lists: list[Sequence[int]], pad: int, device: torch.device) -> torch.Tensor:
    """``[len(token_lists), longest]`` long tensor of the lists, padded with ``pad`` (at least one column)."""
    longest = max(1, max((len(ids) for ids in token_lists), default=0))
    rows = [list(ids) + [pad] * (longest - len(ids)) for ids in token_lists]
    return torch.tensor(rows, dtype=torch.long, device=device)


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
    params = [rows[i].params for i in selected]
    # [M, V + 1]: the last column absorbs the padding's writes
    sub = torch.empty(len(selected), vocab + 1, dtype=logits.dtype, device=dev)
    sub[:, :vocab] = logits.index_select(0, index)
    outputs = padded_ids([rows[i].output_token_ids for i in selected], vocab, dev)  # [M, L]

    repetition = [p.repetition_penalty for p in params]
    if any(r != 1.0 for r in repetition):
        seen = torch.cat([padded_ids([rows[i].prompt_token_ids for i in selected], vocab, dev), outputs], dim=1)
        values = sub.gather(1, seen)  # a token seen twice gets the same new value twice: scatter_ is safe
        penalty = torch.tensor(repetition, dtype=sub.dtype, device=dev)[:, None]
        sub.scatter_(1, seen, torch.where(values > 0, values / penalty, values * penalty))

    real = (outputs < vocab).to(sub.dtype)  # [M, L], 0 on padding
    frequency = torch.tensor([p.frequency_penalty for p in params], dtype=sub.dtype, device=dev)[:, None]
    if bool(frequency.any()):
        sub.scatter_add_(1, outputs, -frequency * real)  # once per occurrence: frequency * count
    presence = torch.tensor([p.presence_penalty for p in params], dtype=sub.dtype, device=dev)[:, None]
    if bool(presence.any()):
        ordered, _ = outputs.sort(dim=1)
        first = torch.ones_like(ordered, dtype=torch.bool)
        first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]  # the first occurrence of each token only
        sub.scatter_add_(1, ordered, -presence * (first & (ordered < vocab)).to(sub.dtype))
    logits.index_copy_(0, index, sub[:, :vocab])
