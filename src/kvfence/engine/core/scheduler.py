"""Continuous batching over the block manager: admission (I3), chunked prefill, preemption.

Each :meth:`Scheduler.schedule` builds one mixed batch under a token budget: a decode token for
each running sequence first, then the next chunk of running prefills, then waiting sequences in
arrival order while their whole allocation fits. A sequence never runs on a partial allocation: it is admitted only when every
page it needs is mapped, and when a running sequence cannot get its next page the newest running
sequence is preempted by recompute (all pages released and scrubbed, back to the front of the
queue). Released pages stay on the page ledger's scrub list, which the model runner zero-fills
inside its forward pass before it reads or writes the pool (I2); the batch shows which ones.

Where RoPE depends on the sequence's length (:mod:`kvfence.engine.layers.rope_lengths`) the
scheduler owns the two rules that keep KV pages true to it, for every loop that drives it: a
sequence's cache scope is narrowed to its rope length past the threshold (a page is then a prefix
hit only for sequences rotated alike, I1), and with ``recompute_at_rope_switch`` (Phi-3) a sequence
that first grows past the threshold is recomputed from its first token, as transformers' Phi-3
``generate`` does: all its pages are released through the normal path (scrubbed, I2; its sealed
pages stay prefix pages of the scope they were computed under) and it is queued again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvfence.engine.core.sequence import FinishReason, Sequence, SequenceStatus
from kvfence.engine.kv.block_manager import BlockManager
from kvfence.engine.layers.rope_lengths import rope_scope_key, rope_switch_length
from kvfence.errors import ConfigError, ContextLengthExceededError, InvalidParameterError

__all__ = ["ScheduledSeq", "Scheduler", "SchedulerConfig", "SchedulerOutput"]


@dataclass(frozen=True)
class SchedulerConfig:
    """Batch limits: sequences per batch, tokens per forward pass, tokens per prefill chunk."""

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_prefill_chunk: int = 512

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_prefill_chunk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1; got {value!r}")


@dataclass
class ScheduledSeq:
    """Compute KV for ``seq.token_ids[start : start + num_new_tokens]``; sample if ``samples``."""

    seq: Sequence
    start: int
    num_new_tokens: int
    samples: bool


@dataclass
class SchedulerOutput:
    """One step's batch. ``scrub_pages``: the pages still owed their zero-fill when it was built, which
    the runner zero-fills inside its forward pass, before it reads or writes the pool (I2)."""

    items: list[ScheduledSeq] = field(default_factory=list)
    scrub_pages: list[int] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.items

    @property
    def num_batched_tokens(self) -> int:
        return sum(item.num_new_tokens for item in self.items)


class Scheduler:
    """Decides which sequences run in each step and owns their lifecycle.

    ``rope_threshold``: the length past which the model's RoPE depends on the sequence's length
    (``None``: it never does); ``recompute_at_rope_switch``: recompute a sequence that grows past it.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        block_manager: BlockManager,
        *,
        max_model_len: int,
        eos_token_ids: Iterable[int] = (),
        rope_threshold: int | None = None,
        recompute_at_rope_switch: bool = False,
    ) -> None:
        if not isinstance(max_model_len, int) or max_model_len < 1:
            raise ConfigError(f"max_model_len must be an integer >= 1; got {max_model_len!r}")
        self.config = config
        self.block_manager = block_manager
        # I3 with I6: a request never takes another scope's parked prefix pages, so the pages
        # outside the prefix-cache budget must hold the longest request the scheduler admits.
        block_manager.reserve(min(block_manager.pages_needed(max_model_len), block_manager.num_pages))
        self.max_model_len = max_model_len
        self.eos_token_ids = frozenset(eos_token_ids)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: the last one is the newest
        self._by_id: dict[str, Sequence] = {}
        self.num_preemptions = 0
        self._decode_turn = 0
        self.rope_threshold = rope_threshold
        # the threshold a sequence is recomputed past (Phi-3), or None
        self._recompute_past = rope_threshold if recompute_at_rope_switch else None
        self.num_rope_recomputes = 0

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def get(self, request_id: str) -> Sequence | None:
        return self._by_id.get(request_id)

    def check_admissible(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """I3: refuse a request that can never fit, before anything is allocated for it."""
        total = num_prompt_tokens + max_tokens
        if total > self.max_model_len:
            raise ContextLengthExceededError(
                f"this model's maximum context length is {self.max_model_len} tokens; the request "
                f"asks for {total} ({num_prompt_tokens} in the prompt + {max_tokens} max_tokens); "
                "shorten the prompt or lower max_tokens",
                param="max_tokens",
            )
        pool_tokens = self.block_manager.num_pages * self.block_manager.page_size
        if self.block_manager.pages_needed(total) > self.block_manager.num_pages:
            raise ContextLengthExceededError(
                f"the request needs {total} tokens of KV cache ({num_prompt_tokens} prompt + "
                f"{max_tokens} max_tokens) but the whole pool holds {pool_tokens}; "
                "shorten the prompt or lower max_tokens",
                param="max_tokens",
            )

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence; raises (I3) before anything is allocated when it cannot fit."""
        if seq.request_id in self._by_id:
            raise InvalidParameterError(
                f"request id {seq.request_id!r} is already in use", param="request_id"
            )
        if seq.block_table or seq.status is not SequenceStatus.WAITING:
            raise ValueError(f"sequence {seq.request_id!r} is not new")
        self.check_admissible(seq.num_prompt_tokens, seq.params.max_tokens)
        seq.scope_key = rope_scope_key(seq.scope_key, seq.rope_length, self.rope_threshold)
        self._by_id[seq.request_id] = seq
        self.waiting.append(seq)

    def add_prefilled(self, seq: Sequence) -> FinishReason | None:
        """Start decoding ``seq``, whose prompt KV arrived by a verified handoff (I4), with its first token.

        Such a sequence skips the waiting queue: its pages are already mapped and hold the verified
        prompt KV, and its first token (sampled by the prefill worker) is appended. If it is
        preempted later, the ordinary recompute path rebuilds its KV locally. Returns the finish
        reason when its first token already ends it (its pages are released then).
        """
        if seq.request_id in self._by_id:
            raise InvalidParameterError(f"request id {seq.request_id!r} is already in use", param="request_id")
        if not seq.block_table or seq.num_computed_tokens != seq.num_prompt_tokens or seq.num_completion_tokens != 1:
            raise ValueError(f"sequence {seq.request_id!r} is not a verified handoff with its first token")
        seq.scope_key = rope_scope_key(seq.scope_key, seq.rope_length, self.rope_threshold)
        seq.status = SequenceStatus.RUNNING
        self._by_id[seq.request_id] = seq
        self.running.append(seq)
        reason = self._finish_reason(seq)
        if reason is not None:
            self.finish(seq, reason)
        return reason

    # ---- one step ----------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Build the next batch (the runner zero-fills the pages released so far before running it, I2)."""
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        if self._recompute_past is not None:
            self._recompute_past_rope_switch(self._recompute_past)
        # Decodes first (one token each keeps inter-token latency steady), then prefill chunks.
        # Only decodes can need a new page: prefills got every page at admission.
        decodes = [s for s in self.running if s.num_tokens - s.num_computed_tokens == 1]
        prefills = [s for s in self.running if s.num_tokens - s.num_computed_tokens != 1]
        if len(decodes) > budget:  # not all fit: take turns, or the oldest would starve the rest
            shift = self._decode_turn % len(decodes)
            decodes = decodes[shift:] + decodes[:shift]
            self._decode_turn += budget
        unscheduled = list(self.running)  # admission order: preemption takes the newest first
        for seq in decodes + prefills:
            if seq.status is not SequenceStatus.RUNNING or budget == 0:
                continue  # preempted as a victim in this step, or no budget left this step
            while not self.block_manager.can_append(seq):
                victim = unscheduled.pop()  # the newest not yet scheduled; seq itself at worst
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            else:
                self.block_manager.may_append(seq)
                budget -= self._schedule_chunk(seq, budget, out)
                unscheduled.remove(seq)
        self.running = [s for s in self.running if s.status is SequenceStatus.RUNNING]

        # Admit in arrival order only; skipping a big head-of-line request would starve it.
        while self.waiting and not out.preempted and budget > 0:
            if len(self.running) >= self.config.max_num_seqs:
                break
            seq = self.waiting[0]
            if not self.block_manager.can_allocate(seq):
                break
            self.waiting.popleft()
            self.block_manager.allocate(seq)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            budget -= self._schedule_chunk(seq, budget, out)

        out.scrub_pages = self.block_manager.pending_scrub()
        return out

    def _schedule_chunk(self, seq: Sequence, budget: int, out: SchedulerOutput) -> int:
        start = seq.num_computed_tokens
        remaining = seq.num_tokens - start
        if remaining <= 0:  # already computed, waiting for postprocess of an earlier batch
            return 0
        limit = budget if remaining == 1 else min(budget, self.config.max_prefill_chunk)
        num_new = min(remaining, limit)
        # max_tokens 0 (score the prompt only): the last prompt position is computed, never sampled.
        samples = start + num_new == seq.num_tokens and seq.params.max_tokens > 0
        out.items.append(ScheduledSeq(seq, start, num_new, samples=samples))
        return num_new

    def _preempt(self, seq: Sequence) -> None:
        """Recompute preemption: release every page (scrubbed, I2) and requeue at the front."""
        self.block_manager.deallocate(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_computed_tokens = 0
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def _recompute_past_rope_switch(self, threshold: int) -> None:
        """Phi-3: running sequences that have just grown past the RoPE switch are recomputed from their
        first token with the long factors, as transformers recomputes them. Their pages are released
        as a preemption releases them (scrubbed, I2) before their scope key changes, so no page of the
        old rotation is ever mapped under the new key (I1); they are queued first, oldest first.

        Only running sequences grow, so only they can cross: a preempted one waits with the rope
        length it had, and its recompute rotates as before."""
        for seq in reversed(self.running):
            length = rope_switch_length(seq.rope_length, seq.num_tokens, threshold)
            if length is None:
                continue
            self.block_manager.deallocate(seq)
            seq.rope_length = length
            seq.scope_key = rope_scope_key(seq.scope_key, length, threshold)
            seq.status = SequenceStatus.WAITING
            seq.num_computed_tokens = 0
            self.waiting.appendleft(seq)
            self.num_rope_recomputes += 1
        self.running = [s for s in self.running if s.status is SequenceStatus.RUNNING]

    def postprocess(self, output: SchedulerOutput, sampled: dict[str, int]) -> list[Sequence]:
        """Record the forward pass: advance progress, seal computed pages, append sampled tokens.

        Returns the sequences that finished in this step (already deallocated).
        """
        finished: list[Sequence] = []
        for item in output.items:
            seq = item.seq
            if seq.is_finished:  # aborted between schedule and postprocess
                continue
            seq.num_computed_tokens = item.start + item.num_new_tokens
            self.block_manager.seal(seq)
            if not item.samples:
                if seq.params.max_tokens == 0 and seq.num_computed_tokens == seq.num_tokens:
                    self.finish(seq, FinishReason.LENGTH)  # the prompt is computed: nothing to generate
                    finished.append(seq)
                continue
            if seq.request_id not in sampled:
                raise KeyError(f"the runner returned no token for request {seq.request_id!r}")
            seq.append_token(sampled[seq.request_id])
            reason = self._finish_reason(seq)
            if reason is not None:
                self.finish(seq, reason)
                finished.append(seq)
        return finished

    def _finish_reason(self, seq: Sequence) -> FinishReason | None:
        params = seq.params
        token = seq.last_token_id
        if seq.num_completion_tokens >= params.min_tokens and (
            token in params.stop_token_ids or (not params.ignore_eos and token in self.eos_token_ids)
        ):
            return FinishReason.STOP
        if seq.num_completion_tokens >= params.max_tokens or seq.num_tokens >= self.max_model_len:
            return FinishReason.LENGTH
        return None

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """End ``seq`` now (e.g. a stop string found by the engine): release and scrub its pages."""
        if seq.is_finished:
            return
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self._by_id.pop(seq.request_id, None)
        self.block_manager.deallocate(seq)

    def abort(self, request_id: str) -> Sequence | None:
        """Abort a request wherever it is; its pages are released and scrubbed. Unknown id: None."""
        seq = self._by_id.get(request_id)
        if seq is None:
            return None
        self.finish(seq, FinishReason.ABORT)
        return seq
