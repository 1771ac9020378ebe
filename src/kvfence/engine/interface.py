"""The typed seam between an engine and the server that drives it (``kvfence serve``).

:class:`Engine` is everything the server reads from and calls on an engine: the single-process
:class:`~kvfence.engine.core.llm_engine.LLMEngine` and the disaggregated decode worker
(:class:`~kvfence.disagg.engine.DisaggregatedEngine`) both satisfy it, checked by mypy where the
server is given one. Outputs have one type, :class:`RequestOutput`, whose optional fields
(``logprobs``, ``prompt_logprobs``, ``error``, ``error_reason``) are None where they do not apply;
statistics have one base type, :class:`EngineStats`. No ``Any`` here: this module is checked with
``mypy --strict`` (``make typecheck``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kvfence.engine.core.outputs import EngineStats, Logprob, PromptLogprobs, RequestOutput
from kvfence.engine.sampling.sampling_params import SamplingParams

if TYPE_CHECKING:
    from kvfence.engine.kv.capacity import Capacity
    from kvfence.engine.text.tokenizer import Tokenizer

__all__ = [
    "Engine", "EngineRequest", "EngineStats", "FailedRequest", "Logprob", "PromptLogprobs", "RequestOutput",
    "SamplingParams",
]

# A request the engine aborted alone because the forward pass failed on it, and the error.
FailedRequest = tuple[str, BaseException]


@dataclass(frozen=True)
class EngineRequest:
    """One engine request: a single choice (``params.n == 1``) over a tokenized prompt."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


class Engine(Protocol):
    """What the server needs from an engine. Not thread-safe: one thread drives it."""

    @property
    def model_name(self) -> str: ...

    @property
    def model_dir(self) -> Path: ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def capacity(self) -> Capacity: ...

    @property
    def is_random_weights(self) -> bool: ...

    @property
    def serves_prompt_only(self) -> bool:
        """Whether ``max_tokens=0`` (compute the prompt, sample nothing) is served."""
        ...

    @property
    def max_num_seqs(self) -> int:
        """Requests one batch holds; the server queues at most this many plus its own queue length."""
        ...

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, scope_key: bytes) -> None:
        """Admit a request or raise :class:`~kvfence.errors.RequestError` before allocating anything (I3)."""
        ...

    def step(self) -> list[RequestOutput]: ...

    def abort_request(self, request_id: str) -> None: ...

    def has_unfinished_requests(self) -> bool: ...

    def take_failed_requests(self) -> list[FailedRequest]: ...

    def stats(self) -> EngineStats: ...
