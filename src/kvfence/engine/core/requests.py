"""One request's bookkeeping, shared by every front end of :class:`~kvfence.engine.core.engine_core.EngineCore`.

The checks a new request gets before anything is allocated (I3), its sampling state (seeded
generator, logprobs so far, tokens banned until ``min_tokens``), its incremental text, and the
:class:`~kvfence.engine.core.outputs.RequestOutput` built from them. The single-process engine and
the disaggregated decode worker both keep a :class:`RequestState` per request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvfence.engine.core.outputs import RequestOutput
from kvfence.engine.core.sequence import FinishReason, Sequence
from kvfence.engine.sampling.sample_rows import Generator, SampleRow
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.engine.text.detokenizer import IncrementalDetokenizer
from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.errors import InvalidParameterError

if TYPE_CHECKING:
    from kvfence.engine.core.runtime import Runtime

__all__ = [
    "RequestState", "advance_text", "banned_until_min_tokens", "check_params", "check_prompt", "seeded_generator",
]


@dataclass
class RequestState:
    """A request's sampling state and text, next to its :class:`Sequence`."""

    seq: Sequence
    detokenizer: IncrementalDetokenizer
    generator: Generator | None
    logprobs: list[dict[int, float]] | None = None
    banned_until_min_tokens: list[int] = field(default_factory=list)

    @classmethod
    def create(cls, seq: Sequence, tokenizer: Tokenizer, runtime: Runtime) -> RequestState:
        params = seq.params
        return cls(
            seq=seq,
            detokenizer=IncrementalDetokenizer.for_params(tokenizer, seq.prompt_token_ids, params),
            generator=seeded_generator(params, runtime),
            logprobs=[] if params.logprobs is not None else None,
            banned_until_min_tokens=banned_until_min_tokens(params, tokenizer.eos_token_ids),
        )

    def sample_row(self) -> SampleRow:
        """What the sampler needs for this request's next token."""
        seq, params = self.seq, self.seq.params
        # Token lists are copied only for the rows that read them.
        outputs = seq.completion_token_ids if params.logits_processors or params.has_penalties else ()
        prompt = seq.prompt_token_ids if params.repetition_penalty != 1.0 else ()
        return SampleRow(params, self.generator, seq.num_completion_tokens, self.banned_until_min_tokens, outputs, prompt)

    def output(self, new_ids: list[int], delta: str, *, finished: bool, error: str | None = None,
               error_reason: str | None = None) -> RequestOutput:
        """This request's progress after a step (``new_ids`` and ``delta`` are the step's part)."""
        seq = self.seq
        reason = seq.finish_reason.value if seq.finish_reason is not None else None
        logprobs = None if self.logprobs is None else list(self.logprobs)
        return RequestOutput(
            request_id=seq.request_id,
            prompt_token_ids=seq.prompt_token_ids,
            token_ids=seq.completion_token_ids,
            new_token_ids=new_ids,
            text=self.detokenizer.text,
            delta_text=delta,
            finished=finished,
            finish_reason=reason if finished else None,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            logprobs=logprobs,
            new_logprobs=None if logprobs is None else logprobs[len(logprobs) - len(new_ids) :],
            prompt_logprobs=seq.prompt_logprobs,
            error=error,
            error_reason=error_reason,
        )


def check_prompt(prompt_token_ids: list[int], vocab_size: int, scope_key: bytes) -> None:
    """The checks on a new request that every engine makes before allocating anything (I3)."""
    if not prompt_token_ids:
        raise InvalidParameterError("the prompt must contain at least one token", param="prompt")
    bad = next((t for t in prompt_token_ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size), None)
    if bad is not None:
        raise InvalidParameterError(f"prompt token id {bad!r} is outside the vocabulary [0, {vocab_size})", param="prompt")
    if not scope_key:
        raise InvalidParameterError("scope_key must not be empty", param="scope_key")


def check_params(params: SamplingParams, vocab_size: int, runtime: Runtime) -> None:
    """Request checks that need the model: one choice per engine request, logit-bias ids in the vocabulary,
    nothing the runtime cannot sample."""
    if params.num_sequences != 1:
        raise InvalidParameterError(
            "an engine request samples one choice; expand n / best_of with parallel_sampling.choice_params "
            "(LLM.generate and the server do)", param="n",
        )
    bad = next((t for t in params.logit_bias if t >= vocab_size), None)
    if bad is not None:
        raise InvalidParameterError(f"logit_bias token id {bad} is outside the vocabulary [0, {vocab_size})",
                                    param="logit_bias")
    runtime.check_params(params)


def seeded_generator(params: SamplingParams, runtime: Runtime) -> Generator | None:
    """The request's own random generator when it has a seed (so its samples do not depend on the batch)."""
    return None if params.seed is None else runtime.generator(params.seed)


def banned_until_min_tokens(params: SamplingParams, eos_token_ids: Iterable[int]) -> list[int]:
    """Tokens that may not be sampled before ``min_tokens``: the stop token ids, and EOS unless ignored."""
    if params.min_tokens == 0:
        return []
    return sorted(set(params.stop_token_ids) | set([] if params.ignore_eos else eos_token_ids))


def advance_text(
    detokenizer: IncrementalDetokenizer,
    seq: Sequence,
    token_id: int,
    finish: Callable[[Sequence, FinishReason], None],
) -> str:
    """Feed one sampled token to the request's text and return the text to stream now.

    A token that ended the request as a stop token (``stop_token_ids`` or EOS) is not part of the
    answer's text, as in vLLM; a stop string found in the text ends the request through ``finish``.
    """
    if not (seq.is_finished and seq.finish_reason is FinishReason.STOP):
        detokenizer.add(token_id)
    if detokenizer.stopped_on is not None:
        if seq.is_finished:
            seq.finish_reason = FinishReason.STOP
        else:
            finish(seq, FinishReason.STOP)
    return detokenizer.take_final_delta() if seq.is_finished else detokenizer.take_delta()
