"""The choices of one HTTP call: ``prompts x n`` (or ``best_of``) engine requests and their answer.

Choice ``j`` of prompt ``i`` is the engine request ``{response_id}-{i}-{j}`` with its own seed
(:func:`~kvfence.engine.sampling.parallel_sampling.choice_params`) and answers as choice index
``i * n + j``, as OpenAI and vLLM number them. With ``best_of > n`` (non-streaming completions
only) every prompt's choices are ranked by cumulative log-probability once all have finished and
the best ``n`` are numbered ``i * n + rank``; the others are dropped from the answer but their
tokens stay in the usage (they were generated).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfence.engine.sampling.parallel_sampling import choice_params, cumulative_logprob, rank_best
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.server.openai.responses import ChoiceState

__all__ = ["ChoiceRequest", "fan_out", "returned_choices"]


@dataclass
class ChoiceRequest:
    """One engine request of the call and the choice it fills."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    state: ChoiceState


def fan_out(response_id: str, prompts: list[list[int]], params: list[SamplingParams]) -> list[ChoiceRequest]:
    """Every engine request of the call, prompt by prompt, choice by choice."""
    out: list[ChoiceRequest] = []
    for i, (prompt, sp) in enumerate(zip(prompts, params, strict=True)):
        for j in range(sp.num_sequences):
            state = ChoiceState(i * sp.num_sequences + j, prompt_index=i)
            out.append(ChoiceRequest(f"{response_id}-{i}-{j}", prompt, choice_params(sp, j), state))
    return out


def returned_choices(choices: list[ChoiceState], params: list[SamplingParams]) -> list[ChoiceState]:
    """The choices the answer carries, in index order (``best_of``: the best ``n`` of each prompt)."""
    kept: list[ChoiceState] = []
    for i, sp in enumerate(params):
        mine = [c for c in choices if c.prompt_index == i]
        if len(mine) <= sp.n:
            kept.extend(mine)
            continue
        scores = [cumulative_logprob(c.token_ids, c.logprobs) for c in mine]
        for rank, k in enumerate(rank_best(scores, sp.n)):
            mine[k].index = i * sp.n + rank
            kept.append(mine[k])
    return sorted(kept, key=lambda c: c.index)
