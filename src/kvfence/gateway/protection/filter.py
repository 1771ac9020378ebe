"""One answer choice's filter and the per-request state it needs (see :mod:`.hook`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvfence.gateway.errors import DetectorFailure, LeakSuspected
from kvfence.gateway.hooks import RequestContext
from kvfence.gateway.protection.detect.encoded import MAX_RUN_CHARS, MIN_RUN_CHARS
from kvfence.gateway.protection.detect.normalise import INVISIBLE
from kvfence.gateway.protection.leak.scan import ENCODED_ALPHABET, AnswerScanner, LeakEvidence
from kvfence.gateway.protection.pseudonymise.slot_syntax import SlotKind
from kvfence.gateway.protection.pseudonymise.streaming import StreamRestorer
from kvfence.gateway.protection.pseudonymise.token_restore import TokenRestorer

if TYPE_CHECKING:
    from kvfence.gateway.protection.hook import ProtectionHook

__all__ = ["ProtectionFilter", "RequestState"]

log = logging.getLogger("kvfence.gateway.protection")

# A run of these at the end of a streamed answer may be base64 or hex the leak scan can only decode
# once it ends (invisible characters too: the scan folds them away, so they do not end a run).
_HELD_ALPHABET = ENCODED_ALPHABET + "".join(INVISIBLE)


@dataclass
class RequestState:
    """What one request's answer filters need; lives only as long as the request context."""

    restore_table: dict[str, str]
    tenant_unit: str
    own_fingerprints: frozenset[int] = frozenset()
    started_at: float = field(default_factory=time.time)
    leak_incident: str | None = None
    json_answer: bool = False  # the request asked for a JSON document (response_format json_object / json_schema)


class ProtectionFilter:
    """One answer choice: leak scan on the raw upstream text, then placeholder restoration."""

    def __init__(self, hook: ProtectionHook, ctx: RequestContext, state: RequestState,
                 scanner: AnswerScanner | None) -> None:
        self._hook = hook
        self._ctx = ctx
        self._state = state
        self._scanner = scanner
        self._restorer = StreamRestorer(state.restore_table)
        self._emitted = 0
        self._stopped: LeakSuspected | None = None
        self._held = ""  # the end of a long base64 / hex run, not passed on until the scan has decoded it
        self._run_chars = 0  # length of the run of such characters the text read so far ends with

    def _check(self, evidence: LeakEvidence | None) -> None:
        if evidence is not None and self._stopped is None:
            self._stopped = self._hook.report_leak(self._ctx, self._state, evidence, self._emitted)
        if self._stopped is not None:
            raise self._stopped

    def _scan(self, delta: str | None) -> None:
        if self._scanner is None:
            return
        try:
            evidence = self._scanner.feed(delta) if delta is not None else self._scanner.finish()
        except Exception as exc:
            # An answer that cannot be checked is not delivered as if it had been (fail closed).
            log.exception("leak scan failed for request %s; answer stopped", self._ctx.request_id)
            self._hook.metrics.detector_failures.inc()
            raise DetectorFailure("the leak check of this answer failed; the rest of the answer was withheld "
                                  "(fail closed)") from exc
        self._check(evidence)

    def restore_into_json_string(self) -> None:
        """This filter's slot is the text of a JSON string (tool-call ``function.arguments``): restored
        values are JSON-escaped, so they can neither break the JSON nor change its structure. Called by
        :class:`~kvfence.gateway.answer.filter.AnswerFilter` before the first ``feed``."""
        self._restorer.kind = SlotKind.JSON_STRING

    def restore_into_content(self) -> None:
        """This filter's slot is the answer's ``content`` (completions ``text``): when the request asked
        for a JSON document (``response_format`` ``json_object`` / ``json_schema``), a value restored
        inside one of its strings is JSON-escaped and text outside strings is left as written
        (:mod:`.slot_syntax`). Called by :class:`~kvfence.gateway.answer.filter.AnswerFilter` before the
        first ``feed``."""
        if self._state.json_answer:
            self._restorer.kind = SlotKind.JSON_DOCUMENT

    def token_restorer(self) -> TokenRestorer:
        """Placeholder restoration for this request's per-token fields (``logprobs``), in the syntax of
        the slot this filter was told about."""
        return TokenRestorer(self._state.restore_table, self._restorer.kind)

    def feed(self, text_delta: str) -> str:
        if self._stopped is not None:
            raise self._stopped
        self._scan(text_delta)
        out = self._restorer.feed(self._hold(text_delta) if self._scanner is not None else text_delta)
        self._emitted += len(out)
        return out

    def _hold(self, delta: str) -> str:
        """What of ``delta`` may go out now: all of it, except the end of a run that could be base64 or
        hex once it is :data:`MIN_RUN_CHARS` long (its first characters went out before it was: about a
        word's worth, as a plain-text run lets six words out before it is caught)."""
        kept = delta.rstrip(_HELD_ALPHABET)
        if not kept:  # the run goes on
            self._run_chars += len(delta)
            if self._run_chars < MIN_RUN_CHARS and not self._held:
                return delta
            self._held += delta
            if len(self._held) > MAX_RUN_CHARS:  # the scan decides at this length too
                out, self._held = self._held, ""
                return out
            return ""
        out, tail = self._held + kept, delta[len(kept):]
        self._held, self._run_chars = "", len(tail)
        if len(tail) >= MIN_RUN_CHARS:
            self._held = tail
            return out
        return out + tail

    def finish(self) -> str:
        if self._stopped is not None:
            raise self._stopped
        self._scan(None)
        held, self._held = self._held, ""
        out = self._restorer.feed(held) + self._restorer.finish() if held else self._restorer.finish()
        self._emitted += len(out)
        return out

