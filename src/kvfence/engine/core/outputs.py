"""What the engine hands back: per-request progress and engine-wide statistics."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["EngineStats", "Logprob", "PromptLogprobs", "RequestOutput"]


@dataclass(frozen=True)
class Logprob:
    """One token's log-probability at one position, its rank there (1 = most likely) and its text."""

    logprob: float
    rank: int
    decoded_token: str | None = None


# One entry per prompt token: None for the first (nothing predicts it), then {token id: Logprob},
# the prompt's own token first, then the most likely tokens at that position.
PromptLogprobs = list[dict[int, Logprob] | None]


@dataclass
class RequestOutput:
    """One request's progress after a step.

    ``token_ids`` and ``text`` are everything generated so far (a stop string is not included);
    ``new_token_ids`` and ``delta_text`` are this step's part. ``num_cached_tokens`` counts the
    prompt tokens served from the request's own cache scope. ``logprobs`` has one dict per
    generated token (chosen token first, then the top alternatives) when they were asked for.
    ``prompt_logprobs`` (``SamplingParams.prompt_logprobs``) has one entry per prompt token, the
    first None; it is complete from the request's first output on, and shared: do not mutate it.
    ``error`` and ``error_reason`` say why a request ended with ``finish_reason="abort"`` and no
    answer (the disaggregated handoff's failure reason, e.g. ``"rejected"``); None otherwise.
    """

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    new_token_ids: list[int]
    text: str
    delta_text: str
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_cached_tokens: int
    logprobs: list[dict[int, float]] | None = None
    new_logprobs: list[dict[int, float]] | None = None
    prompt_logprobs: PromptLogprobs | None = None
    error: str | None = None
    error_reason: str | None = None


@dataclass
class EngineStats:
    """A snapshot of the pool and queues; ``isolation_incidents`` counts paranoid-mode aborts;
    ``num_rope_recomputes`` the sequences recomputed because their rotary embedding changed with their
    length (Phi-3 LongRoPE past ``original_max_position_embeddings``)."""

    num_pages: int
    num_free_pages: int
    num_used_pages: int
    num_waiting: int
    num_running: int
    num_preemptions: int
    prefix_hit_tokens_by_scope: dict[bytes, int] = field(default_factory=dict)
    isolation_incidents: int = 0
    num_rope_recomputes: int = 0
