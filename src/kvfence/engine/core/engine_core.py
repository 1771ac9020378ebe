"""``EngineCore``: the model, its KV pool and page ledger, and the one step every loop runs.

:meth:`EngineCore.step` is the whole iteration: schedule a batch; in paranoid mode re-check I1 for
every scheduled request (a violation aborts the request, never answers it); run the forward pass
and sample, retrying halves of the batch when it fails so that only the request(s) that fail on
their own are aborted (:mod:`.fault_isolation`); hand the sampled tokens to the caller's hook while
the pages are still held (the prefill worker captures them for the handoff); record the step in the
scheduler (progress, sealing, finished requests released); zero-fill what was released (I2).

The single-process engine (:class:`~kvfence.engine.core.llm_engine.LLMEngine`), the disaggregated
decode worker and the prefill worker all drive this step; they differ only in what they do with
its result. I2 itself is not a step of the loop: the model runner zero-fills the ledger's scrub
list inside every call that reads or writes the pool
(:meth:`~kvfence.engine.runner.model_runner.ModelRunner.scrub_released`), so no loop can skip it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kvfence.engine.config import EngineConfig, ModelConfig
from kvfence.engine.core.fault_isolation import rewind_on_failure, run_isolating_faults
from kvfence.engine.core.outputs import EngineStats
from kvfence.engine.core.runtime import Runner, Runtime, load_runtime
from kvfence.engine.core.scheduler import ScheduledSeq, Scheduler, SchedulerConfig, SchedulerOutput
from kvfence.engine.core.sequence import FinishReason, Sequence
from kvfence.engine.kv.block_manager import BlockManager, PageState
from kvfence.engine.kv.capacity import Capacity, plan_capacity
from kvfence.engine.layers.rope_lengths import rope_length_threshold
from kvfence.engine.runner.default_model import ensure_default_model
from kvfence.engine.runner.model_path import resolve_model_dir
from kvfence.engine.sampling.sample_rows import Generator, SampledToken, SampleRow
from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.errors import IsolationViolation

if TYPE_CHECKING:
    from kvfence.engine.sampling.prompt_logprobs import PromptScores

__all__ = ["EngineCore", "StepRequest", "StepResult"]

log = logging.getLogger(__name__)


class StepRequest(Protocol):
    """What :meth:`EngineCore.step` reads and updates on each scheduled request."""

    @property
    def generator(self) -> Generator | None: ...

    @property
    def logprobs(self) -> list[dict[int, float]] | None: ...

    def sample_row(self) -> SampleRow: ...


@dataclass
class StepResult:
    """What one step did. Every request in ``incidents`` and ``failed`` is aborted already: its pages
    are released and zero-filled (I2); the caller answers it with an error, never with text."""

    sampled: dict[str, int] = field(default_factory=dict)
    finished: list[Sequence] = field(default_factory=list)  # ended in this step (released)
    incidents: list[Sequence] = field(default_factory=list)  # I1 violations (paranoid mode, or the hook)
    failed: list[Sequence] = field(default_factory=list)  # the forward pass fails on them (fault isolation)
    error: BaseException | None = None  # the forward pass's error, when it failed
    is_broken: bool = False  # no request ran, even alone: the engine itself is at fault
    prompt_scores: dict[str, PromptScores] = field(default_factory=dict)


class EngineCore:
    """One model on one KV pool: the runner, the page ledger, the scheduler and :meth:`step`.

    Not thread-safe: drive it from one thread. ``scheduler_max_model_len`` lowers the context the
    scheduler admits below the pool's own (the decode worker's limit agreed with its prefill worker).
    """

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.runtime: Runtime = load_runtime(config)  # the array library: torch, or native (no torch)
        model_dir = resolve_model_dir(config.model) if config.model is not None else ensure_default_model()
        self.model_dir = model_dir
        self.model_config = ModelConfig.from_dir(model_dir)
        self.model_name = self.model_config.name or model_dir.name
        if config.model is not None and model_dir != Path(config.model).expanduser():
            self.model_name = config.model  # a hub id found in the local cache is served by that id
        self.is_random_weights = self.model_config.is_random_weights
        self.tokenizer = Tokenizer.from_dir(model_dir, extra_eos_token_ids=self.model_config.eos_token_ids)
        runtime = self.runtime
        self.capacity: Capacity = plan_capacity(
            max_position_embeddings=self.model_config.max_context_len,  # RoPE scaling may stretch it
            kv_bytes_per_token=self.model_config.kv_bytes_per_token * runtime.kv_element_size,
            page_size=config.page_size,
            max_model_len=config.max_model_len,
            kv_cache_tokens=config.kv_cache_tokens,
            kv_cache_memory=config.kv_cache_memory,
            available_memory=runtime.pool_memory(model_dir),
            max_num_seqs=config.max_num_seqs,
            scrub=config.scrub,
            prefix_cache_tokens=config.prefix_cache_tokens,
            prefix_cache_scope_tokens=config.prefix_cache_scope_tokens,
        )
        self.block_manager = BlockManager(
            self.capacity.num_pages, config.page_size, scrub=config.scrub,
            cache_pages=self.capacity.prefix_cache_pages, scope_pages=self.capacity.prefix_cache_scope_pages,
            flush_above_pages=self.capacity.prefix_cache_flush_above_pages,
            unsafe_shared_prefix_cache=config.unsafe_shared_prefix_cache,
        )
        self.runner: Runner = runtime.runner(
            model_dir,
            self.model_config,
            max_len=self.capacity.max_model_len,
            num_pages=self.capacity.num_pages,
            page_size=config.page_size,
            ledger=self.block_manager.ledger,  # the runner zero-fills its scrub list before each pool access (I2)
        )
        if self.capacity.prefix_cache_flush_above_pages is not None and not config.unsafe_shared_prefix_cache:
            flush_above = self.capacity.prefix_cache_flush_above_pages * config.page_size
            log.warning(
                "the KV pool (%d tokens) leaves less than half of itself once a max_model_len=%d request runs: "
                "the prefix cache keeps %d tokens, and a request that may grow past %d tokens (prompt + max_tokens) "
                "empties every tenant's prefix cache when it starts, a one-bit signal to other tenants (I6). "
                "For the strict partition give the pool room: --kv-cache-tokens >= max_model_len + "
                "--prefix-cache-tokens", self.capacity.pool_tokens, self.capacity.max_model_len,
                self.capacity.prefix_cache_pages * config.page_size, flush_above,
            )
        self.scheduler = self._scheduler(self.capacity.max_model_len)
        self.generator = runtime.generator(config.seed)
        self.isolation_incidents = 0
        if self.is_random_weights:
            log.warning("model %s has RANDOM WEIGHTS (built-in test model): its output is gibberish", self.model_name)
        log.info(
            "engine ready: model=%s runtime=%s device=%s dtype=%s kv_cache_dtype=%s max_model_len=%d pool=%d tokens "
            "(%d pages of %d) scrub=%s prefix cache=%s",
            self.model_name, runtime.name, runtime.device_name, config.dtype, config.resolved_kv_cache_dtype, self.capacity.max_model_len,
            self.capacity.pool_tokens, self.capacity.num_pages, config.page_size,
            "on" if config.scrub else "OFF (UNSAFE)",
            "ONE LRU FOR ALL SCOPES (UNSAFE)" if config.unsafe_shared_prefix_cache else
            f"{self.capacity.prefix_cache_pages} pages, {self.capacity.prefix_cache_scope_pages} per scope at least",
        )

    def _scheduler(self, max_model_len: int) -> Scheduler:
        config = self.config
        return Scheduler(
            SchedulerConfig(config.max_num_seqs, config.max_num_batched_tokens, config.max_prefill_chunk),
            self.block_manager,
            max_model_len=max_model_len,
            eos_token_ids=self.tokenizer.eos_token_ids,
            rope_threshold=rope_length_threshold(self.model_config.rope_scaling, self.model_config.max_position_embeddings),
            recompute_at_rope_switch=self.model_config.recompute_at_rope_switch,
        )

    def limit_max_model_len(self, max_model_len: int) -> None:
        """Admit at most ``max_model_len`` tokens per request from now on (before the first request)."""
        if self.scheduler.has_unfinished():
            raise RuntimeError("limit_max_model_len() must be called before the first request")
        self.scheduler = self._scheduler(max_model_len)

    @property
    def device(self) -> object:
        """The runner's device (a ``torch.device`` under the torch runtime)."""
        return self.runner.device

    # ---- requests ----------------------------------------------------------------------------

    def abort(self, request_id: str) -> Sequence | None:
        """Abort a request wherever it is; its pages are released and zero-filled now (I2). Unknown id: None."""
        seq = self.scheduler.abort(request_id)
        if seq is not None:
            self.runner.scrub_released()
        return seq

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """End ``seq`` now (a stop string found in its text): pages released and zero-filled (I2)."""
        self.scheduler.finish(seq, reason)
        self.runner.scrub_released()

    def release(self, seq: Sequence) -> None:
        """Release pages the ledger gave ``seq`` outside the scheduler (a handoff that failed), zero-filled now."""
        self.block_manager.deallocate(seq)
        self.runner.scrub_released()

    def add_prefilled(self, seq: Sequence) -> FinishReason | None:
        """Start decoding a verified handoff (:meth:`Scheduler.add_prefilled`); a first token that ends
        it releases its pages, zero-filled now."""
        reason = self.scheduler.add_prefilled(seq)
        if reason is not None:
            self.runner.scrub_released()
        return reason

    # ---- one iteration -----------------------------------------------------------------------

    def step(
        self,
        requests: Mapping[str, StepRequest],
        *,
        before_release: Callable[[Sequence, SampledToken], None] | None = None,
    ) -> StepResult:
        """Schedule, verify (paranoid mode), run and sample with fault isolation, postprocess.

        ``requests`` holds the sampling state of every scheduled request, by request id.
        ``before_release(seq, token)`` runs for each sampled request after sampling and before the
        scheduler records the step (and so before a request that ends releases its pages); an
        :class:`IsolationViolation` it raises aborts that request as an incident.
        """
        result = StepResult()
        batch = self.scheduler.schedule()
        if self.config.verify_isolation:
            self._verify(batch, result)
        # The runner zero-fills released pages inside execute() in any case (I2); doing it here first,
        # outside fault isolation, makes a failing zero-fill the engine's error (raised, the pages still
        # owed), never one request's fault.
        self.runner.scrub_released()
        sampled = self._forward_isolating_faults(batch, requests, result)
        if before_release is not None:
            for it, token in sampled:
                try:
                    before_release(it.seq, token)
                except IsolationViolation as exc:
                    self._incident(it.seq, exc, result)
        result.sampled = {it.seq.request_id: tok.token_id for it, tok in sampled if not it.seq.is_finished}
        result.finished = self.scheduler.postprocess(batch, result.sampled)
        # Pages released in this step (finished requests) are zeroed now rather than at the next
        # forward pass, so stale KV does not sit in the pool while the engine idles (defence in depth).
        self.runner.scrub_released()
        return result

    def _verify(self, batch: SchedulerOutput, result: StepResult) -> None:
        """Paranoid mode: re-check I1 for every scheduled request; a violation aborts it."""
        kept = []
        for it in batch.items:
            try:
                self.block_manager.verify(it.seq)
            except IsolationViolation as exc:
                self._incident(it.seq, exc, result)
                continue
            kept.append(it)
        batch.items = kept

    def _incident(self, seq: Sequence, exc: IsolationViolation, result: StepResult) -> None:
        self.isolation_incidents += 1
        log.error("ISOLATION INCIDENT: %s; request %s aborted", exc, seq.request_id)
        # The release must touch only pages the ledger says it holds.
        seq.block_table = self.block_manager.ledger_block_table(seq)
        try:
            self.abort(seq.request_id)
        except IsolationViolation:
            log.critical("could not release request %s after an incident", seq.request_id, exc_info=True)
        result.incidents.append(seq)

    def _forward_isolating_faults(
        self, batch: SchedulerOutput, requests: Mapping[str, StepRequest], result: StepResult
    ) -> list[tuple[ScheduledSeq, SampledToken]]:
        """The forward pass and sampling over the batch; when it fails, halves are retried and only the
        request(s) that fail on their own are aborted (:mod:`.fault_isolation`)."""
        sampled: list[tuple[ScheduledSeq, SampledToken]] = []

        def attempt(group: list[ScheduledSeq]) -> None:
            scores: dict[str, PromptScores] = {}
            with rewind_on_failure(requests[it.seq.request_id].generator for it in group):
                if any(it.seq.wants_prompt_logprobs for it in group):
                    items, logits = self.runner.execute(group, scores)
                else:  # the common batch: the runner's plain call
                    items, logits = self.runner.execute(group)
                rows = [requests[it.seq.request_id].sample_row() for it in items]
                tokens = self.runtime.sample(logits, rows, self.generator)
            for it, tok in zip(items, tokens, strict=True):
                req_logprobs = requests[it.seq.request_id].logprobs
                if req_logprobs is not None and tok.logprobs is not None:
                    req_logprobs.append(tok.logprobs)
                sampled.append((it, tok))
            result.prompt_scores.update(scores)

        outcome = run_isolating_faults(batch.items, attempt)
        batch.items = outcome.succeeded
        if outcome.error is None:
            return sampled
        result.error = outcome.error
        result.is_broken = outcome.is_broken
        log.error("forward pass failed on a batch of %d request(s)", len(outcome.failed) + len(outcome.succeeded),
                  exc_info=outcome.error)
        for it in outcome.failed:
            log.error("request %s fails the forward pass%s; aborted, the other %d request(s) of the batch continue",
                      it.seq.request_id, " on its own" if it in outcome.culprits else " (retry budget spent)",
                      len(outcome.succeeded))
            self.abort(it.seq.request_id)
            result.failed.append(it.seq)
        return sampled

    # ---- introspection -----------------------------------------------------------------------

    def stats(self, *, num_waiting: int = 0) -> EngineStats:
        """The pool and queues now; ``num_waiting`` adds requests a front end holds outside the scheduler."""
        bm = self.block_manager
        return EngineStats(
            num_pages=bm.num_pages,
            num_free_pages=bm.num_free_pages,
            num_used_pages=bm.num_used_pages,
            num_waiting=self.scheduler.num_waiting + num_waiting,
            num_running=self.scheduler.num_running,
            num_preemptions=self.scheduler.num_preemptions,
            prefix_hit_tokens_by_scope=dict(bm.prefix_hit_tokens_by_scope),
            isolation_incidents=self.isolation_incidents,
            num_rope_recomputes=self.scheduler.num_rope_recomputes,
        )

    def free_pages(self) -> list[int]:
        """Pages in the FREE state (not cached prefix pages, not mapped)."""
        bm = self.block_manager
        return [p for p in range(bm.num_pages) if bm.page_info(p).state is PageState.FREE]

    def pool_is_zero(self, pages: list[int] | None = None) -> bool:
        """Debug/test helper: True when ``pages`` (default: every free page) are all zero in the pool."""
        return self.runner.pages_are_zero(self.free_pages() if pages is None else list(pages))

