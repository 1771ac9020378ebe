"""The decode side's scheduler: the engine's continuous batching, plus admission of handed-over work."""

from __future__ import annotations

from kvfence.engine.core.scheduler import Scheduler
from kvfence.engine.core.sequence import FinishReason, Sequence, SequenceStatus
from kvfence.errors import InvalidParameterError

__all__ = ["DecodeScheduler"]


class DecodeScheduler(Scheduler):
    """A :class:`Scheduler` that also takes sequences whose prompt KV arrived by handoff.

    Such a sequence skips the waiting queue: its pages are already mapped and hold the verified
    prompt KV (I4), and its first token (sampled by the prefill worker) is appended. If it is
    preempted later, the ordinary recompute path rebuilds its KV locally.
    """

    def add_prefilled(self, seq: Sequence) -> FinishReason | None:
        """Start decoding ``seq``; returns the finish reason when its first token already ends it."""
        if seq.request_id in self._by_id:
            raise InvalidParameterError(f"request id {seq.request_id!r} is already in use", param="request_id")
        if not seq.block_table or seq.num_computed_tokens != seq.num_prompt_tokens or seq.num_completion_tokens != 1:
            raise ValueError(f"sequence {seq.request_id!r} is not a verified handoff with its first token")
        seq.status = SequenceStatus.RUNNING
        self._by_id[seq.request_id] = seq
        self.running.append(seq)
        reason = self._finish_reason(seq)
        if reason is not None:
            self.finish(seq, reason)
        return reason
