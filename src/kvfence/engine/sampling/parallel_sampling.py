"""Several choices for one prompt (``n``, ``best_of``): per-choice parameters, admission, ranking.

Each choice is an ordinary engine request with ``n=1``; ``LLM.generate`` and the server expand a
request into its choices with :func:`choice_params`. Choices of one prompt run under the caller's
cache scope, so their prompt pages are computed once and shared through the prefix cache (the
engine holds identical prompts back until the first has sealed its pages); nothing crosses scopes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ContextLengthExceededError

__all__ = ["check_choices_fit", "choice_params", "choice_seed", "cumulative_logprob", "pages_for_choices", "rank_best"]


def choice_seed(seed: int, index: int) -> int:
    """The seed of choice ``index``: ``seed`` itself for choice 0 (so ``n=1`` answers as before),
    a keyed hash of ``(seed, index)`` for the others (distinct streams, unlike ``seed + index``,
    which would make choice 1 of seed 0 equal choice 0 of seed 1)."""
    if index == 0:
        return seed
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8, person=b"kvfence-choice").digest()
    return int.from_bytes(digest, "big") >> 1  # [0, 2**63): what every torch generator accepts


def choice_params(params: SamplingParams, index: int) -> SamplingParams:
    """The ``n=1`` parameters of choice ``index`` of ``params``.

    With ``best_of > n`` every choice records its log-probabilities (at least the chosen token's),
    since they rank the choices; the caller hides them when the client did not ask for them.
    The prompt's log-probabilities (``prompt_logprobs``) are computed by choice 0 only: the
    prompt is the same for all, and the others can then map its pages from the prefix cache.
    """
    ranks = params.best_of is not None and params.best_of > params.n
    return dataclasses.replace(
        params,
        n=1,
        best_of=None,
        seed=None if params.seed is None else choice_seed(params.seed, index),
        logprobs=0 if ranks and params.logprobs is None else params.logprobs,
        prompt_logprobs=params.prompt_logprobs if index == 0 else None,
    )


def pages_for_choices(
    num_prompt_tokens: int, max_tokens: int, num_choices: int, page_size: int, *, shares_prefix: bool
) -> int:
    """KV pages ``num_choices`` sequences of one prompt hold at most, all at once.

    With prefix sharing the full prompt pages before the last prompt token are held once (what
    a same-scope prefix hit maps); every choice owns the rest.
    """
    per_choice = -(-(num_prompt_tokens + max_tokens) // page_size)
    shared = (num_prompt_tokens - 1) // page_size if shares_prefix else 0
    return per_choice + (num_choices - 1) * (per_choice - shared)


def check_choices_fit(
    num_prompt_tokens: int, params: SamplingParams, num_pages: int, page_size: int, *, shares_prefix: bool
) -> None:
    """I3 for a request with several choices: refused before anything is queued unless all of them
    fit in the KV pool at the same time (a single choice is checked by the scheduler)."""
    count = params.num_sequences
    if count == 1:
        return
    needed = pages_for_choices(num_prompt_tokens, params.max_tokens, count, page_size, shares_prefix=shares_prefix)
    if needed > num_pages:
        name = "best_of" if params.best_of is not None else "n"
        raise ContextLengthExceededError(
            f"{name}={count} choices of {num_prompt_tokens} prompt + {params.max_tokens} max_tokens need "
            f"{needed} KV pages of {page_size} tokens at once, but the pool has {num_pages}; "
            f"lower {name} or max_tokens",
            param=name,
        )


def cumulative_logprob(token_ids: Sequence[int], logprobs: Sequence[dict[int, float]] | None) -> float:
    """Sum of the chosen tokens' log-probabilities (``-inf`` when they were not recorded)."""
    if logprobs is None or len(logprobs) < len(token_ids):
        return float("-inf")
    return sum(entry.get(token, float("-inf")) for token, entry in zip(token_ids, logprobs, strict=False))


def rank_best(scores: Sequence[float], n: int) -> list[int]:
    """Indices of the ``n`` highest scores, best first (ties keep choice order)."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:n]
