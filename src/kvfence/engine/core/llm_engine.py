"""The single-process engine: requests in, one :class:`EngineCore` step per iteration, incremental outputs back.

:class:`LLMEngine` is the front end that the server and ``LLM`` drive. The step itself (schedule,
paranoid I1 check, forward pass with fault isolation, sampling, postprocess; the runner zero-fills
released pages inside the forward pass, I2) is :meth:`EngineCore.step`, shared with both sides of
disaggregated serving. What is this front end's own: requests held back for a same-scope leader's
prompt (:class:`SharedPrefill`), detokenization and stop strings, prompt log-probabilities, and the
:class:`RequestOutput` of each request that made progress.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from kvfence.engine.config import EngineConfig, ModelConfig
from kvfence.engine.core.engine_core import EngineCore
from kvfence.engine.core.outputs import EngineStats, RequestOutput
from kvfence.engine.core.requests import (
    RequestState,
    advance_text,
    banned_until_min_tokens,
    check_params,
    check_prompt,
    seeded_generator,
)
from kvfence.engine.core.runtime import Runner
from kvfence.engine.core.scheduler import Scheduler
from kvfence.engine.core.sequence import FinishReason, Sequence, SequenceStatus
from kvfence.engine.kv.block_manager import BlockManager
from kvfence.engine.kv.capacity import Capacity
from kvfence.engine.kv.shared_prefill import SharedPrefill
from kvfence.engine.sampling.prompt_logprobs import PromptScores, append_prompt_logprobs
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.errors import InvalidParameterError

__all__ = [
    "LLMEngine", "advance_text", "banned_until_min_tokens", "check_params", "check_prompt", "seeded_generator",
]

log = logging.getLogger(__name__)


class LLMEngine:
    """A paged-KV engine for one model. Not thread-safe: drive it from one thread (or one asyncio task).

    ``max_tokens=0`` requests compute their prompt and end without sampling (``serves_prompt_only``).
    """

    # Read by the server: an engine without it (disaggregated) is sent max_tokens >= 1.
    serves_prompt_only = True

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.core = EngineCore(config)
        self._requests: dict[str, RequestState] = {}
        self._shared_prefill = SharedPrefill(config.page_size)
        self._failed_requests: list[tuple[str, BaseException]] = []

    # The core's parts, read by the server, ``LLM`` and the tests.

    @property
    def model_dir(self) -> Path:
        return self.core.model_dir

    @property
    def model_config(self) -> ModelConfig:
        return self.core.model_config

    @property
    def model_name(self) -> str:
        return self.core.model_name

    @property
    def is_random_weights(self) -> bool:
        return self.core.is_random_weights

    @property
    def tokenizer(self) -> Tokenizer:
        return self.core.tokenizer

    @property
    def capacity(self) -> Capacity:
        return self.core.capacity

    @property
    def runner(self) -> Runner:
        return self.core.runner

    @property
    def block_manager(self) -> BlockManager:
        return self.core.block_manager

    @property
    def scheduler(self) -> Scheduler:
        return self.core.scheduler

    @property
    def isolation_incidents(self) -> int:
        return self.core.isolation_incidents

    @property
    def max_num_seqs(self) -> int:
        return self.config.max_num_seqs

    # ---- requests ----------------------------------------------------------------------------

    def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, scope_key: bytes
    ) -> None:
        """Queue a request (one choice: ``params.n`` and ``best_of`` must be 1, see
        :func:`~kvfence.engine.sampling.parallel_sampling.choice_params`). Raises before anything is
        allocated when it can never run (I3).

        A request whose prompt and scope equal those of one still computing its prompt waits for
        that prompt's pages and maps them as prefix hits (:class:`SharedPrefill`).
        """
        if request_id in self._requests:
            raise InvalidParameterError(f"request id {request_id!r} is already in use", param="request_id")
        check_prompt(prompt_token_ids, self.model_config.vocab_size, scope_key)
        check_params(params, self.model_config.vocab_size, self.core.runtime)
        seq = Sequence(request_id, prompt_token_ids, scope_key, params)
        if self._shared_prefill.hold(seq):
            self.scheduler.check_admissible(seq.num_prompt_tokens, params.max_tokens)  # I3 now, queued later
        else:
            self.scheduler.add(seq)
        self._requests[request_id] = RequestState.create(seq, self.tokenizer, self.core.runtime)

    def abort_request(self, request_id: str) -> None:
        """Abort a request; its pages are released and zero-filled now (I2). Unknown id: no-op."""
        held = self._shared_prefill.discard(request_id)
        if held is not None:
            held.status, held.finish_reason = SequenceStatus.FINISHED, FinishReason.ABORT  # never had pages
        elif self.core.abort(request_id) is not None:
            self._queue_released()
        self._requests.pop(request_id, None)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished() or self._shared_prefill.num_held > 0

    def _queue_released(self) -> None:
        """Queue held requests whose leader has computed (and sealed) its prompt, or ended."""
        for seq in self._shared_prefill.release():
            self.scheduler.add(seq)

    # ---- one iteration -----------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one batch; return outputs of requests that made progress or finished."""
        result = self.core.step(self._requests)
        outputs: list[RequestOutput] = []
        for seq in result.incidents:  # aborted by paranoid mode: an empty, finished output, never text
            if (req := self._requests.pop(seq.request_id, None)) is not None:
                outputs.append(req.output([], "", finished=True))
        for seq in result.failed:  # aborted alone by fault isolation: answered by take_failed_requests
            self._requests.pop(seq.request_id, None)
            self._failed_requests.append((seq.request_id, result.error or RuntimeError("forward pass failed")))
        if result.is_broken and result.error is not None:
            self._queue_released()
            raise result.error  # nothing runs, even alone: not one request's fault
        self._record_prompt_logprobs(result.prompt_scores)
        for request_id, token_id in result.sampled.items():
            outputs.append(self._progress(request_id, token_id))
        for seq in result.finished:  # max_tokens 0: ended with its prompt computed, no token sampled
            if seq.request_id not in result.sampled and (req := self._requests.pop(seq.request_id, None)) is not None:
                outputs.append(req.output([], "", finished=True))
        self._queue_released()
        return outputs

    def take_failed_requests(self) -> list[tuple[str, BaseException]]:
        """Requests aborted since the last call because the forward pass failed on them, with the error."""
        failed, self._failed_requests = self._failed_requests, []
        return failed

    def _record_prompt_logprobs(self, prompt_scores: dict[str, PromptScores]) -> None:
        """Append this step's prompt scores to their sequences (in order: no gap, no duplicate)."""
        decode = functools.cache(self._decode_one_token)  # top tokens repeat from position to position
        for request_id, scores in prompt_scores.items():
            req = self._requests.get(request_id)
            if req is not None and req.seq.prompt_logprobs is not None:
                append_prompt_logprobs(req.seq.prompt_logprobs, scores, decode)

    def _decode_one_token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def _progress(self, request_id: str, token_id: int) -> RequestOutput:
        req = self._requests[request_id]
        seq = req.seq
        delta = advance_text(req.detokenizer, seq, token_id, self.core.finish)
        if seq.is_finished:
            self._requests.pop(request_id, None)
        return req.output([token_id], delta, finished=seq.is_finished)

    # ---- introspection -----------------------------------------------------------------------

    def stats(self) -> EngineStats:
        return self.core.stats(num_waiting=self._shared_prefill.num_held)

    def free_pages(self) -> list[int]:
        """Pages in the FREE state (not cached prefix pages, not mapped)."""
        return self.core.free_pages()

    def pool_is_zero(self, pages: list[int] | None = None) -> bool:
        """Debug/test helper: True when ``pages`` (default: every free page) are all zero in the pool."""
        return self.core.pool_is_zero(pages)

