"""The engine loop: requests in, one mixed batch per step, incremental outputs back.

Each :meth:`LLMEngine.step` schedules a batch, zero-fills the pages released since the last step
(I2) before the forward pass, optionally re-checks I1 for every scheduled request (paranoid mode),
runs the model, samples, detokenizes and applies stop strings. A forward pass that fails is retried
in halves so only the request(s) that fail on their own are aborted (:mod:`.fault_isolation`).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from kvfence.engine.config import EngineConfig, ModelConfig
from kvfence.engine.core.fault_isolation import rewind_on_failure, run_isolating_faults
from kvfence.engine.core.outputs import EngineStats, RequestOutput
from kvfence.engine.core.scheduler import ScheduledSeq, Scheduler, SchedulerConfig, SchedulerOutput
from kvfence.engine.core.sequence import FinishReason, Sequence, SequenceStatus
from kvfence.engine.kv.block_manager import BlockManager, PageState
from kvfence.engine.kv.capacity import Capacity, plan_capacity
from kvfence.engine.kv.shared_prefill import SharedPrefill
from kvfence.engine.layers.rotary import rope_scope_key
from kvfence.engine.layers.sampler import SampleRow, sample
from kvfence.engine.runner.default_model import ensure_default_model
from kvfence.engine.runner.loader import checkpoint_files
from kvfence.engine.runner.model_path import resolve_model_dir
from kvfence.engine.runner.model_runner import ModelRunner, resolve_device, torch_dtype
from kvfence.engine.sampling.prompt_logprobs import PromptScores, append_prompt_logprobs
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.engine.text.detokenizer import IncrementalDetokenizer
from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.errors import InvalidParameterError, IsolationViolation

__all__ = [
    "LLMEngine", "SamplingState", "advance_text", "banned_until_min_tokens", "check_params", "check_prompt",
    "seeded_generator",
]

log = logging.getLogger(__name__)


class SamplingState(Protocol):
    """What :meth:`LLMEngine.forward_and_sample` reads and updates on a request."""

    seq: Sequence
    generator: torch.Generator | None
    logprobs: list[dict[int, float]] | None
    banned_until_min_tokens: list[int]


def _sample_row(req: SamplingState) -> SampleRow:
    seq, params = req.seq, req.seq.params
    # Token lists are copied only for the rows that read them.
    outputs = seq.completion_token_ids if params.logits_processors or params.has_penalties else ()
    prompt = seq.prompt_token_ids if params.repetition_penalty != 1.0 else ()
    return SampleRow(params, req.generator, seq.num_completion_tokens, req.banned_until_min_tokens, outputs, prompt)


@dataclass
class _Request:
    seq: Sequence
    detokenizer: IncrementalDetokenizer
    generator: torch.Generator | None
    logprobs: list[dict[int, float]] | None = None
    banned_until_min_tokens: list[int] = field(default_factory=list)


class LLMEngine:
    """A paged-KV engine for one model. Not thread-safe: drive it from one thread (or one asyncio task).

    ``max_tokens=0`` requests compute their prompt and end without sampling (``serves_prompt_only``).
    """

    # Read by the server: an engine without it (disaggregated) is sent max_tokens >= 1.
    serves_prompt_only = True

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        model_dir = resolve_model_dir(config.model) if config.model is not None else ensure_default_model()
        self.model_dir = model_dir
        self.model_config = ModelConfig.from_dir(model_dir)
        self.model_name = self.model_config.name or model_dir.name
        if config.model is not None and model_dir != Path(config.model).expanduser():
            self.model_name = config.model  # a hub id found in the local cache is served by that id
        self.is_random_weights = self.model_config.is_random_weights
        self.tokenizer = Tokenizer.from_dir(model_dir, extra_eos_token_ids=self.model_config.eos_token_ids)
        device = resolve_device(config.device)
        dtype = torch_dtype(config.dtype)
        kv_dtype = torch_dtype(config.resolved_kv_cache_dtype)
        element_size = torch.empty(0, dtype=kv_dtype).element_size()
        self.capacity: Capacity = plan_capacity(
            max_position_embeddings=self.model_config.max_context_len,  # RoPE scaling may stretch it
            kv_bytes_per_token=self.model_config.kv_bytes_per_token * element_size,
            page_size=config.page_size,
            max_model_len=config.max_model_len,
            kv_cache_tokens=config.kv_cache_tokens,
            kv_cache_memory=config.kv_cache_memory,
            available_memory=_default_pool_memory(device, model_dir),
            max_num_seqs=config.max_num_seqs,
            scrub=config.scrub,
            prefix_cache_tokens=config.prefix_cache_tokens,
            prefix_cache_scope_tokens=config.prefix_cache_scope_tokens,
        )
        self.runner = ModelRunner(
            model_dir,
            self.model_config,
            max_len=self.capacity.max_model_len,
            num_pages=self.capacity.num_pages,
            page_size=config.page_size,
            dtype=dtype,
            device=device,
            kv_dtype=kv_dtype,
        )
        self.block_manager = BlockManager(
            self.capacity.num_pages, config.page_size, scrub=config.scrub,
            cache_pages=self.capacity.prefix_cache_pages, scope_pages=self.capacity.prefix_cache_scope_pages,
            flush_above_pages=self.capacity.prefix_cache_flush_above_pages,
            unsafe_shared_prefix_cache=config.unsafe_shared_prefix_cache,
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
        self.scheduler = Scheduler(
            SchedulerConfig(config.max_num_seqs, config.max_num_batched_tokens, config.max_prefill_chunk),
            self.block_manager,
            max_model_len=self.capacity.max_model_len,
            eos_token_ids=self.tokenizer.eos_token_ids,
        )
        self._generator = torch.Generator(device=device).manual_seed(config.seed)
        self._requests: dict[str, _Request] = {}
        self._shared_prefill = SharedPrefill(config.page_size)
        self.isolation_incidents = 0
        self._failed_requests: list[tuple[str, BaseException]] = []
        if self.is_random_weights:
            log.warning("model %s has RANDOM WEIGHTS (built-in test model): its output is gibberish", self.model_name)
        log.info(
            "engine ready: model=%s device=%s dtype=%s kv_cache_dtype=%s max_model_len=%d pool=%d tokens "
            "(%d pages of %d) scrub=%s prefix cache=%s",
            self.model_name, device, config.dtype, config.resolved_kv_cache_dtype, self.capacity.max_model_len, self.capacity.pool_tokens,
            self.capacity.num_pages, config.page_size, "on" if config.scrub else "OFF (UNSAFE)",
            "ONE LRU FOR ALL SCOPES (UNSAFE)" if config.unsafe_shared_prefix_cache else
            f"{self.capacity.prefix_cache_pages} pages, {self.capacity.prefix_cache_scope_pages} per scope at least",
        )

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
        check_params(params, self.model_config.vocab_size)
        scope_key = rope_scope_key(scope_key, len(prompt_token_ids), self.runner.model.model.rotary.length_threshold)
        seq = Sequence(request_id, prompt_token_ids, scope_key, params)
        if self._shared_prefill.hold(seq):
            self.scheduler.check_admissible(seq.num_prompt_tokens, params.max_tokens)  # I3 now, queued later
        else:
            self.scheduler.add(seq)
        self._requests[request_id] = _Request(
            seq=seq,
            detokenizer=IncrementalDetokenizer.for_params(self.tokenizer, prompt_token_ids, params),
            generator=seeded_generator(params, self.runner.device),
            logprobs=[] if params.logprobs is not None else None,
            banned_until_min_tokens=banned_until_min_tokens(params, self.tokenizer.eos_token_ids),
        )

    def abort_request(self, request_id: str) -> None:
        """Abort a request; its pages are released and zero-filled now (I2). Unknown id: no-op."""
        held = self._shared_prefill.discard(request_id)
        if held is not None:
            held.status, held.finish_reason = SequenceStatus.FINISHED, FinishReason.ABORT  # never had pages
        elif self.scheduler.abort(request_id) is not None:
            self.block_manager.flush_scrub(self.runner.scrub)
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
        batch = self.scheduler.schedule()
        self.block_manager.flush_scrub(self.runner.scrub, batch.scrub_pages)  # I2: before any request can read these pages
        outputs: list[RequestOutput] = []
        if self.config.verify_isolation:
            outputs.extend(self._verify(batch))
        prompt_scores: dict[str, PromptScores] = {}
        sampled = self._forward_isolating_faults(batch, prompt_scores)
        self._record_prompt_logprobs(prompt_scores)
        finished = self.scheduler.postprocess(batch, sampled)
        for request_id, token_id in sampled.items():
            outputs.append(self._progress(request_id, token_id))
        for seq in finished:  # max_tokens 0: ended with its prompt computed, no token sampled
            if seq.request_id not in sampled and (req := self._requests.pop(seq.request_id, None)) is not None:
                outputs.append(self._output(req, [], "", finished=True))
        self._queue_released()
        # Pages released in this step (finished requests) are zeroed now rather than next step,
        # so stale KV does not sit in the pool while the engine idles (I2, defence in depth).
        self.block_manager.flush_scrub(self.runner.scrub)
        return outputs

    def _verify(self, batch: SchedulerOutput) -> list[RequestOutput]:
        """Paranoid mode: re-check I1 for every scheduled request; a violation aborts it."""
        kept, outputs = [], []
        for it in batch.items:
            try:
                self.block_manager.verify(it.seq)
            except IsolationViolation as exc:
                self.isolation_incidents += 1
                log.error("ISOLATION INCIDENT: %s; request %s aborted", exc, it.seq.request_id)
                req = self._requests.get(it.seq.request_id)
                # The release below must touch only pages the ledger says it holds.
                it.seq.block_table = self.block_manager.ledger_block_table(it.seq)
                try:
                    self.scheduler.abort(it.seq.request_id)
                except IsolationViolation:
                    log.critical("could not release request %s after an incident", it.seq.request_id, exc_info=True)
                if req is not None:
                    outputs.append(self._output(req, [], "", finished=True))
                    self._requests.pop(it.seq.request_id, None)
                continue
            kept.append(it)
        batch.items = kept
        return outputs

    def forward_and_sample(
        self,
        items: list[ScheduledSeq],
        requests: Mapping[str, SamplingState],
        generator: torch.Generator,
        abort: Callable[[str], None],
        prompt_scores: dict[str, PromptScores] | None = None,
    ) -> dict[str, int]:
        """Run the model over ``items`` and sample one token for each sequence that samples.

        Returns ``{request_id: token_id}`` and appends each token's logprobs to its request. Used
        by this engine's step and by the disaggregated decode worker. When the forward pass or the
        sampler fails, every request of the batch is aborted through ``abort`` (which releases and
        zero-fills its pages, I2) and the error is re-raised. ``prompt_scores`` receives the
        prompt positions scored for requests that ask for prompt log-probabilities.
        """
        if not items:
            return {}
        try:
            if prompt_scores is not None and any(it.seq.wants_prompt_logprobs for it in items):
                sample_items, logits = self.runner.execute(items, prompt_scores)
            else:  # the common batch: the runner's plain call
                sample_items, logits = self.runner.execute(items)
            rows = [_sample_row(requests[it.seq.request_id]) for it in sample_items]
            tokens = sample(logits, rows, generator)
        except Exception:
            log.exception("forward pass failed on a batch of %d requests", len(items))
            for it in items:
                abort(it.seq.request_id)
            raise
        sampled: dict[str, int] = {}
        for it, tok in zip(sample_items, tokens, strict=True):
            sampled[it.seq.request_id] = tok.token_id
            req = requests[it.seq.request_id]
            if req.logprobs is not None and tok.logprobs is not None:
                req.logprobs.append(tok.logprobs)
        return sampled

    def _forward_isolating_faults(self, batch: SchedulerOutput, prompt_scores: dict[str, PromptScores]) -> dict[str, int]:
        """:meth:`forward_and_sample` over the batch; when it fails, only the request(s) that fail on
        their own are aborted (pages released and zero-filled, I2), found by retrying halves of the
        batch (:mod:`.fault_isolation`), and the others' step runs as if nothing happened.

        The aborted ones are reported by :meth:`take_failed_requests`. When no request of a batch of
        two or more runs even alone, the engine itself is broken: all are aborted and the error raised.
        """
        def attempt(group: list[ScheduledSeq]) -> None:
            scores: dict[str, PromptScores] = {}
            with rewind_on_failure(self._requests[it.seq.request_id].generator for it in group):
                got = self.forward_and_sample(group, self._requests, self._generator, _no_abort, scores)
            sampled.update(got)
            prompt_scores.update(scores)

        sampled: dict[str, int] = {}
        outcome = run_isolating_faults(batch.items, attempt)
        if outcome.error is None:
            return sampled
        for it in outcome.failed:
            log.error("request %s fails the forward pass%s; aborted, the other %d request(s) of the batch continue",
                      it.seq.request_id, " on its own" if it in outcome.culprits else " (retry budget spent)",
                      len(outcome.succeeded))
            self.abort_request(it.seq.request_id)
            self._failed_requests.append((it.seq.request_id, outcome.error))
        batch.items = outcome.succeeded
        if outcome.is_broken:
            raise outcome.error  # nothing runs, even alone: not one request's fault
        return sampled

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
        delta = advance_text(req.detokenizer, seq, token_id, self.scheduler.finish)
        if seq.is_finished:
            self._requests.pop(request_id, None)
        return self._output(req, [token_id], delta, finished=seq.is_finished)

    def _output(self, req: _Request, new_ids: list[int], delta: str, *, finished: bool) -> RequestOutput:
        seq = req.seq
        reason = seq.finish_reason.value if seq.finish_reason is not None else None
        logprobs = None if req.logprobs is None else list(req.logprobs)
        return RequestOutput(
            request_id=seq.request_id,
            prompt_token_ids=seq.prompt_token_ids,
            token_ids=seq.completion_token_ids,
            new_token_ids=new_ids,
            text=req.detokenizer.text,
            delta_text=delta,
            finished=finished,
            finish_reason=reason if finished else None,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            logprobs=logprobs,
            new_logprobs=None if logprobs is None else logprobs[len(logprobs) - len(new_ids) :],
            prompt_logprobs=seq.prompt_logprobs,
        )

    # ---- introspection -----------------------------------------------------------------------

    def stats(self) -> EngineStats:
        bm = self.block_manager
        return EngineStats(
            num_pages=bm.num_pages,
            num_free_pages=bm.num_free_pages,
            num_used_pages=bm.num_used_pages,
            num_waiting=self.scheduler.num_waiting + self._shared_prefill.num_held,
            num_running=self.scheduler.num_running,
            num_preemptions=self.scheduler.num_preemptions,
            prefix_hit_tokens_by_scope=dict(bm.prefix_hit_tokens_by_scope),
            isolation_incidents=self.isolation_incidents,
        )

    def free_pages(self) -> list[int]:
        """Pages in the FREE state (not cached prefix pages, not mapped)."""
        return [p for p in range(self.block_manager.num_pages) if self.block_manager.page_info(p).state is PageState.FREE]

    def pool_is_zero(self, pages: list[int] | None = None) -> bool:
        """Debug/test helper: True when ``pages`` (default: every free page) are all zero in the pool."""
        return self.runner.pages_are_zero(self.free_pages() if pages is None else list(pages))


def _no_abort(request_id: str) -> None:
    """The abort callback of a retried forward pass: fault isolation decides whom to abort."""


def check_prompt(prompt_token_ids: list[int], vocab_size: int, scope_key: bytes) -> None:
    """The checks on a new request that every engine makes before allocating anything (I3)."""
    if not prompt_token_ids:
        raise InvalidParameterError("the prompt must contain at least one token", param="prompt")
    bad = next((t for t in prompt_token_ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size), None)
    if bad is not None:
        raise InvalidParameterError(f"prompt token id {bad!r} is outside the vocabulary [0, {vocab_size})", param="prompt")
    if not scope_key:
        raise InvalidParameterError("scope_key must not be empty", param="scope_key")


def check_params(params: SamplingParams, vocab_size: int) -> None:
    """Request checks that need the model: one choice per engine request, logit-bias ids in the vocabulary."""
    if params.num_sequences != 1:
        raise InvalidParameterError(
            "an engine request samples one choice; expand n / best_of with parallel_sampling.choice_params "
            "(LLM.generate and the server do)", param="n",
        )
    bad = next((t for t in params.logit_bias if t >= vocab_size), None)
    if bad is not None:
        raise InvalidParameterError(f"logit_bias token id {bad} is outside the vocabulary [0, {vocab_size})",
                                    param="logit_bias")


def seeded_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """The request's own random generator when it has a seed (so its samples do not depend on the batch)."""
    return None if params.seed is None else torch.Generator(device=device).manual_seed(params.seed)


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


def _default_pool_memory(device: torch.device, model_dir: Path) -> int:
    """Bytes the default KV pool may take: a quarter of RAM on CPU, half of what the weights leave on GPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        weights = sum(f.stat().st_size for f in checkpoint_files(model_dir))
        return max(0, (free - weights) // 2)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return total // 4
