"""Restoring placeholders in a streamed answer, where a placeholder may be split across chunks.

The restorer emits everything it can at once and holds back only a suffix that may still become a
known placeholder in one of its written forms (``"<EMA"`` or ``"\\u003cEMA"`` while ``<EMAIL_1>`` is in
the table; :mod:`.placeholder_forms`). So a chunk is delayed by at most the longest form less one
character, and by nothing when the request had no personal data.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvfence.gateway.protection.placeholder_forms import PlaceholderForms

__all__ = ["StreamRestorer"]


class StreamRestorer:
    """Feeds on text deltas of one choice's slot; returns restored text that is safe to emit now.

    ``json_string``: the slot is the text of a JSON string (tool-call ``function.arguments``), so
    restored values are JSON-escaped there.
    """

    def __init__(self, table: Mapping[str, str], *, json_string: bool = False) -> None:
        self._forms = PlaceholderForms(table)
        self.json_string = json_string
        self._pending = ""
        self._backslashes_before = 0  # the backslash run that ended the text already emitted

    @property
    def held(self) -> int:
        """Characters currently held back."""
        return len(self._pending)

    def _emit(self, text: str) -> str:
        if not text:
            return ""
        out = self._forms.restore(text, json_string=self.json_string,
                                  backslashes_before=self._backslashes_before)
        if text[-1] != "\\":
            self._backslashes_before = 0
        else:
            run = len(text) - len(text.rstrip("\\"))
            self._backslashes_before = self._backslashes_before + run if run == len(text) else run
        return out

    def feed(self, delta: str) -> str:
        if not self._forms:
            return delta
        buffer = self._pending + delta
        hold_from = self._forms.hold_from(buffer)
        self._pending = buffer[hold_from:]
        return self._emit(buffer[:hold_from])

    def finish(self) -> str:
        rest, self._pending = self._pending, ""
        return self._emit(rest)
