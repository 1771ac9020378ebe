"""What a sampler reads per batch row and returns per token, whichever array library samples.

Both samplers (torch, :mod:`kvfence.engine.layers.sampler`; NumPy, :mod:`kvfence.engine.native.sampler`)
take a :class:`SampleRow` per row and return a :class:`SampledToken` per row, in the same order of
operations. A row's ``generator`` is its own seeded random source (or ``None``: the engine's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kvfence.engine.sampling.sampling_params import SamplingParams

__all__ = ["Generator", "SampleRow", "SampledToken"]


class Generator(Protocol):
    """A random source whose state can be saved and restored (a retried request draws again what it drew)."""

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> Any: ...


@dataclass
class SampleRow:
    """What the sampler needs to know about one sequence of the batch."""

    params: SamplingParams
    generator: Generator | None  # per-request when a seed was given (reproducible)
    num_generated: int
    banned_until_min_tokens: list[int]  # EOS / stop ids that may not end it before min_tokens
    output_token_ids: Sequence[int] = ()  # generated so far (logits processors, penalties)
    prompt_token_ids: Sequence[int] = ()  # the prompt (repetition penalty); may be empty when unused


@dataclass
class SampledToken:
    token_id: int
    logprobs: dict[int, float] | None  # chosen token first, then the top-n alternatives
