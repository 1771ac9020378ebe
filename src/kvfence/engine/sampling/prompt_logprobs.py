"""Prompt log-probabilities (``SamplingParams.prompt_logprobs``): which positions, and their scores.

The logits at position ``p`` score prompt token ``p + 1``. A chunk of prefill ``[start, end)``
therefore scores tokens ``start + 1 .. end`` of the prompt, minus those already scored (a chunk
recomputed after preemption) and minus the token after the prompt (that one is sampled). Only
requests that ask for them pay for the LM head over all their positions; the reduction to the
token's own log-probability, its rank and the top ``n`` happens in the runtime's array library (on
the device for torch, :func:`score_positions`; NumPy for the native runtime,
:func:`score_positions_numpy`), a slice of rows at a time, so a long chunk never holds
``[chunk, vocab]`` float32 logits at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kvfence.engine.core.outputs import Logprob, PromptLogprobs
from kvfence.engine.core.sequence import Sequence

if TYPE_CHECKING:
    import torch

__all__ = ["PromptScores", "append_prompt_logprobs", "positions_to_score", "score_positions", "score_positions_numpy"]

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
    compute_logits: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, seq: Sequence, span: range
) -> PromptScores:
    """Score the prompt tokens that positions ``span`` of ``seq`` predict (:func:`positions_to_score`),
    ``hidden`` [len(span), D] their hidden states: log_softmax of the LM head's logits in float32, a
    slice of rows at a time, reduced on the tensors' device. torch is imported here, not above: the
    native runtime scores with :func:`score_positions_numpy`."""
    import torch

    targets_list, num_top = _targets(seq, span), _num_top(seq)
    with torch.inference_mode():
        targets = torch.tensor(targets_list, dtype=torch.long, device=hidden.device)
        own: list[torch.Tensor] = []
        ranks: list[torch.Tensor] = []
        top_values: list[torch.Tensor] = []
        top_ids: list[torch.Tensor] = []
        for lo, hi in _slices(len(span)):
            logprobs = torch.log_softmax(compute_logits(hidden[lo:hi]).float(), dim=-1)  # [r, V]
            target = logprobs.gather(1, targets[lo:hi, None])  # [r, 1]
            own.append(target.squeeze(1))
            ranks.append((logprobs > target).sum(dim=1) + 1)
            if num_top > 0:
                values, ids = logprobs.topk(min(num_top, logprobs.shape[-1]), dim=-1)
                top_values.append(values)
                top_ids.append(ids)
        return _prompt_scores(
            seq, span, torch.cat(own).tolist(), torch.cat(ranks).tolist(),
            torch.cat(top_ids).tolist() if top_ids else None, torch.cat(top_values).tolist() if top_values else None,
        )


def score_positions_numpy(
    compute_logits: Callable[[np.ndarray], np.ndarray], hidden: np.ndarray, seq: Sequence, span: range
) -> PromptScores:
    """:func:`score_positions` in NumPy (the native runtime's): ``hidden`` [len(span), D] float32."""
    targets, num_top = np.asarray(_targets(seq, span), dtype=np.int64), _num_top(seq)
    own: list[np.ndarray] = []
    ranks: list[np.ndarray] = []
    top_values: list[np.ndarray] = []
    top_ids: list[np.ndarray] = []
    for lo, hi in _slices(len(span)):
        logits = compute_logits(hidden[lo:hi]).astype(np.float32, copy=False)  # [r, V]
        shifted = logits - logits.max(axis=1, keepdims=True)
        logprobs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        target = logprobs[np.arange(hi - lo), targets[lo:hi]]  # [r]
        own.append(target)
        ranks.append((logprobs > target[:, None]).sum(axis=1) + 1)
        if num_top > 0:
            k = min(num_top, logprobs.shape[-1])
            ids = np.argpartition(-logprobs, k - 1, axis=1)[:, :k]
            values = np.take_along_axis(logprobs, ids, axis=1)
            order = np.argsort(-values, axis=1, kind="stable")  # descending, as topk
            top_ids.append(np.take_along_axis(ids, order, axis=1))
            top_values.append(np.take_along_axis(values, order, axis=1))
    return _prompt_scores(
        seq, span, np.concatenate(own).tolist(), np.concatenate(ranks).tolist(),
        np.concatenate(top_ids).tolist() if top_ids else None,
        np.concatenate(top_values).tolist() if top_values else None,
    )


def _targets(seq: Sequence, span: range) -> list[int]:
    """The prompt tokens positions ``span`` predict: each position's next token."""
    return seq.token_ids[span.start + 1 : span.stop + 1]


def _num_top(seq: Sequence) -> int:
    return seq.params.prompt_logprobs or 0


def _slices(num_rows: int) -> list[tuple[int, int]]:
    """Row ranges of at most ``_ROWS_PER_SLICE``: the [rows, vocab] float32 alive at once."""
    return [(lo, min(lo + _ROWS_PER_SLICE, num_rows)) for lo in range(0, num_rows, _ROWS_PER_SLICE)]


def _prompt_scores(
    seq: Sequence, span: range, logprobs: list[float], ranks: list[int],
    top_ids: list[list[int]] | None, top_logprobs: list[list[float]] | None,
) -> PromptScores:
    """The scores of ``span`` (no top lists: one empty list per row)."""
    return PromptScores(
        first_index=span.start + 1,
        token_ids=_targets(seq, span),
        logprobs=logprobs,
        ranks=ranks,
        top_ids=top_ids if top_ids is not None else [[] for _ in span],
        top_logprobs=top_logprobs if top_logprobs is not None else [[] for _ in span],
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
