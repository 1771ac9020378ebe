"""Restoring placeholders in a streamed answer, where a placeholder may be split across chunks.

The restorer emits everything it can at once and holds back only a suffix that may still become a
known placeholder in one of its written forms (``"<EMA"`` or ``"\\u003cEMA"`` while ``<EMAIL_1>`` is in
the table; :mod:`.placeholder_forms`). So a chunk is delayed by at most the longest form less one
character, and by nothing when the request had no personal data. How a value is written back depends
on the slot's kind (prose, a JSON string's text, a JSON document: :mod:`.slot_syntax`).
"""

from __future__ import annotations

from collections.abc import Mapping

from kvfence.gateway.protection.pseudonymise.forms import PlaceholderForms
from kvfence.gateway.protection.pseudonymise.slot_syntax import SlotKind, SlotWriter

__all__ = ["StreamRestorer"]


class StreamRestorer:
    """Feeds on text deltas of one choice's slot; returns restored text that is safe to emit now.

    ``kind``: the slot's syntax (:class:`~.slot_syntax.SlotKind`); ``json_string=True`` is short for
    ``kind=SlotKind.JSON_STRING`` (tool-call ``function.arguments``, restored values JSON-escaped).
    Set ``kind`` before the first ``feed``.
    """

    def __init__(self, table: Mapping[str, str], *, json_string: bool = False,
                 kind: SlotKind = SlotKind.TEXT) -> None:
        self._forms = PlaceholderForms(table)
        self._writer = SlotWriter(self._forms, SlotKind.JSON_STRING if json_string else kind)
        self._pending = ""

    @property
    def kind(self) -> SlotKind:
        return self._writer.kind

    @kind.setter
    def kind(self, kind: SlotKind) -> None:
        self._writer.kind = kind

    @property
    def held(self) -> int:
        """Characters currently held back."""
        return len(self._pending)

    def _emit(self, text: str) -> str:
        return self._writer.restore(text) if text else ""

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
