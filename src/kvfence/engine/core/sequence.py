"""One request as the engine sees it: its tokens, its pages and where it stands."""

from __future__ import annotations

import enum
import time

from kvfence.engine.core.outputs import PromptLogprobs
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import InvalidParameterError

__all__ = ["FinishReason", "Sequence", "SequenceStatus"]


class SequenceStatus(enum.Enum):
    """Lifecycle of a sequence: waiting for pages, running in batches, or done."""

    WAITING = enum.auto()
    RUNNING = enum.auto()
    FINISHED = enum.auto()


class FinishReason(enum.StrEnum):
    """Why a completion ended, spelled as the OpenAI API spells it."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


class Sequence:
    """A request's prompt plus generated tokens, with its block table and progress counters.

    ``scope_key`` is the server-computed cache scope (invariant I5); the block manager only lets
    this sequence map prefix pages sealed under the same key (I1).

    ``num_cached_tokens`` counts prompt tokens served from the prefix cache at admission;
    ``num_computed_tokens`` counts tokens whose KV is already in the sequence's pages (chunked
    prefill advances it step by step; preemption resets it to 0).

    ``rope_length`` is the sequence length its tokens are rotated for up to it, where RoPE depends on
    the length (:mod:`kvfence.engine.layers.rope_lengths`): the prompt's, or (Phi-3) its length when
    it first grew past the LongRoPE threshold and was recomputed.

    ``prompt_logprobs`` (when the params ask for them) grows as prefill chunks are computed: entry
    ``i`` scores prompt token ``i``; it survives preemption, so a recompute adds nothing twice.
    """

    def __init__(
        self,
        request_id: str,
        token_ids: list[int],
        scope_key: bytes,
        params: SamplingParams | None = None,
        *,
        arrival_time: float | None = None,
    ) -> None:
        if not token_ids:
            raise InvalidParameterError("the prompt must contain at least one token", param="prompt")
        self.request_id = request_id
        self.token_ids: list[int] = list(token_ids)
        self.num_prompt_tokens = len(self.token_ids)
        self.rope_length = self.num_prompt_tokens
        self.scope_key = scope_key
        self.params = params if params is not None else SamplingParams()
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.num_cached_tokens = 0
        self.num_computed_tokens = 0
        self.finish_reason: FinishReason | None = None
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.prompt_logprobs: PromptLogprobs | None = None if self.params.prompt_logprobs is None else [None]

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, status={self.status.name}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, pages={self.block_table})"
        )

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def last_token_id(self) -> int:
        return self.token_ids[-1]

    @property
    def wants_prompt_logprobs(self) -> bool:
        """True when every prompt position must be computed here (no prefix-cache hit may skip one)."""
        return self.prompt_logprobs is not None

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        """Add a sampled token; its KV is computed by the next step (it is not computed yet)."""
        self.token_ids.append(token_id)
