"""Prompt log-probabilities (``SamplingParams.prompt_logprobs``): which positions, and their scores.

The logits at position ``p`` score prompt token ``p + 1``. A chunk of prefill ``[start, end)``
therefore scores tokens ``start + 1 .. end`` of the prompt, minus those already scored (a chunk
recomputed after preemption) and minus the token after the prompt (that one is sampled). Only
requests that ask for them pay for the LM head over all their positions; the reduction to the
token's own log-probability, its rank and the top ``n`` happens on the device, a slice of rows at
a time, so a long chunk never holds ``[chunk, vocab]`` float32 logits at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvfence.engine.core.outputs import Logprob, PromptLogprobs
from kvfence.engine.core.sequence import Sequence

if TYPE_CHECKING:
    import torch

__all__ = ["PromptScores", "append_prompt_logprobs", "positions_to_score", "score_positions"]

_ROWS_PER_SLICE = 128  # rows of [rows, vocab] float32 log-probabilities alive at once


@dataclass
class PromptScores:
    """Scores of prompt tokens ``first_index ..`` of one request, from one forward pass."""

    first_index: int  # prompt index of the first scored token (>= 1)
    token_ids: list[int]
    logprobs: list[float]
    ranks: list[int]  # 1 = the most likely token at that position
    top_ids: list[list[int]]
    top_logprobs: list[list[float]]


def positions_to_score(seq: Sequence, start: int, num_new_tokens: int) -> range:
    """Positions of the chunk ``[start, start + num_new_tokens)`` whose logits score a prompt token
    of ``seq`` not scored yet (empty when ``seq`` does not ask for prompt log-probabilities)."""
    if seq.prompt_logprobs is None:
        return range(0)
    first = max(start, len(seq.prompt_logprobs) - 1)
    last = min(start + num_new_tokens, seq.num_prompt_tokens - 1)
    return range(first, max(first, last))


def score_positions(
    compute_logits: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    target_ids: list[int],
    num_top: int,
    first_index: int,
) -> PromptScores:
    """Score ``target_ids`` (one per row of ``hidden`` [R, D]) under the LM head: log_softmax in float32.
    The torch runtime's (the native one refuses ``prompt_logprobs``): torch is imported here, not above."""
    import torch

    with torch.inference_mode():
        dev = hidden.device
        targets = torch.tensor(target_ids, dtype=torch.long, device=dev)
        own: list[torch.Tensor] = []
        ranks: list[torch.Tensor] = []
        top_values: list[torch.Tensor] = []
        top_ids: list[torch.Tensor] = []
        for lo in range(0, hidden.shape[0], _ROWS_PER_SLICE):
            hi = min(lo + _ROWS_PER_SLICE, hidden.shape[0])
            logprobs = torch.log_softmax(compute_logits(hidden[lo:hi]).float(), dim=-1)  # [r, V]
            target = logprobs.gather(1, targets[lo:hi, None])  # [r, 1]
            own.append(target.squeeze(1))
            ranks.append((logprobs > target).sum(dim=1) + 1)
            if num_top > 0:
                values, ids = logprobs.topk(min(num_top, logprobs.shape[-1]), dim=-1)
                top_values.append(values)
                top_ids.append(ids)
        rows = len(target_ids)
        return PromptScores(
            first_index=first_index,
            token_ids=list(target_ids),
            logprobs=torch.cat(own).tolist(),
            ranks=torch.cat(ranks).tolist(),
            top_ids=torch.cat(top_ids).tolist() if top_ids else [[] for _ in range(rows)],
            top_logprobs=torch.cat(top_values).tolist() if top_values else [[] for _ in range(rows)],
        )


def append_prompt_logprobs(entries: PromptLogprobs, scores: PromptScores, decode: Callable[[int], str]) -> None:
    """Append ``scores`` to a request's ``entries``, which must end right before them.

    Raises RuntimeError on a gap or an overlap: a prompt token scored twice or never is an engine bug.
    """
    if scores.first_index != len(entries):
        raise RuntimeError(
            f"prompt log-probabilities out of order: have {len(entries)} entries, got scores from {scores.first_index}"
        )
    for i, token in enumerate(scores.token_ids):
        entry = {token: Logprob(scores.logprobs[i], scores.ranks[i], decode(token))}
        for rank, (tid, lp) in enumerate(zip(scores.top_ids[i], scores.top_logprobs[i], strict=True), start=1):
            if tid not in entry:
                entry[tid] = Logprob(lp, rank, decode(tid))
        entries.append(entry)
