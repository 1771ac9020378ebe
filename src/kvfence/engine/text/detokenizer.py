"""Incremental, UTF-8-safe detokenization with stop strings.

Text is released only once it is stable: a token that ends inside a multi-byte character decodes
to U+FFFD and is held back until the character completes. While stop strings are set, the last
``len(longest stop) - 1`` characters are also held back, so a stream never shows the start of a
stop string that the final text will not contain.
"""

from __future__ import annotations

from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.engine.text.tokenizer import Tokenizer

__all__ = ["IncrementalDetokenizer"]

_CONTEXT_TOKENS = 6  # prompt tokens kept as context: some decoders drop a leading space otherwise


class IncrementalDetokenizer:
    """Feeds generated tokens in, gives text deltas out; ``text`` is all text released so far."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: list[int],
        stop: list[str],
        skip_special_tokens: bool = True,
        include_stop: bool = False,
    ) -> None:
        self._tokenizer = tokenizer
        self._include_stop = include_stop
        self._skip_special = skip_special_tokens
        self._ids = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._stop = stop
        self._holdback = max((len(s) for s in stop), default=1) - 1
        self._decoded = ""  # stable text decoded so far (stop string cut off)
        self._released = 0  # characters of _decoded handed out
        self.stopped_on: str | None = None

    @classmethod
    def for_params(cls, tokenizer: Tokenizer, prompt_token_ids: list[int], params: SamplingParams) -> IncrementalDetokenizer:
        """The detokenizer of one request: its stop strings and text options."""
        return cls(tokenizer, prompt_token_ids, params.stop, params.skip_special_tokens,
                   params.include_stop_str_in_output)

    @property
    def text(self) -> str:
        return self._decoded[: self._released]

    def add(self, token_id: int) -> None:
        """Decode one more token; sets ``stopped_on`` when a stop string appears."""
        if self.stopped_on is not None:
            return
        self._ids.append(token_id)
        prefix = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full = self._decode(self._ids[self._prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self._append(full[len(prefix) :])
            self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)

    def flush(self) -> None:
        """End of generation: release everything still held back (incomplete bytes become U+FFFD)."""
        if self.stopped_on is None and self._read_offset < len(self._ids):
            prefix = self._decode(self._ids[self._prefix_offset : self._read_offset])
            full = self._decode(self._ids[self._prefix_offset :])
            if len(full) > len(prefix):
                self._append(full[len(prefix) :])
            self._read_offset = len(self._ids)
        self._released = len(self._decoded)

    def take_delta(self) -> str:
        """Text that became releasable since the last call."""
        limit = len(self._decoded) if self.stopped_on is not None else len(self._decoded) - self._holdback
        if limit <= self._released:
            return ""
        delta = self._decoded[self._released : limit]
        self._released = limit
        return delta

    def take_final_delta(self) -> str:
        before = self._released
        self.flush()
        return self._decoded[before:]

    def _append(self, new_text: str) -> None:
        search_from = max(0, len(self._decoded) - self._holdback)
        self._decoded += new_text
        if not self._stop:
            return
        hits = [(idx, s) for s in self._stop if (idx := self._decoded.find(s, search_from)) >= 0]
        if hits:
            idx, stop = min(hits)
            self._decoded = self._decoded[: idx + len(stop) if self._include_stop else idx]
            self.stopped_on = stop

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special)
