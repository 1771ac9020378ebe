"""Restoring placeholders in a streamed answer, where a placeholder may be split across chunks.

The restorer emits everything it can at once and holds back only a suffix that is a proper prefix
of a known placeholder (``"<EMA"`` while ``<EMAIL_1>`` is in the table). So a chunk is delayed by at
most ``len(longest placeholder) - 1`` characters, and by nothing when the request had no personal
data.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvfence.gateway.protection.pseudonymise import PLACEHOLDER

__all__ = ["StreamRestorer"]


class StreamRestorer:
    """Feeds on text deltas of one choice; returns restored text that is safe to emit now."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self._table = dict(table)
        self._prefixes = {p[:i] for p in self._table for i in range(1, len(p))}
        self._max_hold = max((len(p) - 1 for p in self._table), default=0)
        self._pending = ""

    @property
    def held(self) -> int:
        """Characters currently held back."""
        return len(self._pending)

    def _restore(self, text: str) -> str:
        if "<" not in text:
            return text
        return PLACEHOLDER.sub(lambda m: self._table.get(m.group(0), m.group(0)), text)

    def feed(self, delta: str) -> str:
        if not self._table:
            return delta
        buffer = self._pending + delta
        hold_from = len(buffer)
        # Only a '<' within the last max_hold characters can start an incomplete placeholder.
        search_from = max(0, len(buffer) - self._max_hold)
        index = buffer.find("<", search_from)
        while index != -1:
            if buffer[index:] in self._prefixes:
                hold_from = index
                break
            index = buffer.find("<", index + 1)
        self._pending = buffer[hold_from:]
        return self._restore(buffer[:hold_from])

    def finish(self) -> str:
        rest, self._pending = self._pending, ""
        return self._restore(rest)
