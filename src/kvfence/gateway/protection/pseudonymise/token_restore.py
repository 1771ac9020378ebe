"""Restoring placeholders inside per-token fields (``logprobs``), where one placeholder spans tokens.

A model writes ``<EMAIL_1>`` as several tokens (``<``, ``EMAIL``, ``_``, ``1``, ``>``). The answer text
gets the address back (:mod:`.streaming`); the tokens must neither keep the placeholder nor carry half
of it. Rule: in the tokens' joined text every known placeholder is replaced by its value; the whole
value goes to the token where the placeholder starts, the other tokens it covered lose those characters
(often becoming ``""``), and every token that covered part of a placeholder is reported as *spanned*,
so the caller can drop what no longer describes it (its ``top_logprobs`` alternatives, its ``bytes``).
The joined tokens then equal the restored answer text.

Placeholders are found in every written form the text restorer knows (``\\u003cEMAIL_1\\u003e``,
``&lt;EMAIL_1&gt;`` ...; :mod:`.placeholder_forms`) and the value is written as that form needs, so
the tokens spell exactly the restored text. Streamed, tokens are held back while their joined text
ends in what may still become a placeholder (as the text restorer holds characters), so a placeholder
split across chunks is still seen whole.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import TypeVar

from kvfence.gateway.protection.pseudonymise.forms import PlaceholderForms
from kvfence.gateway.protection.pseudonymise.slot_syntax import SlotKind, SlotWriter

__all__ = ["TokenRestorer"]

E = TypeVar("E")
TokenOf = Callable[[E], str]
Rebuild = Callable[[E, str, bool], E]  # (entry, restored token, spanned a placeholder) -> entry


class TokenRestorer:
    """One token stream (e.g. a choice's ``logprobs.content``): feed entries, get entries safe to emit."""

    def __init__(self, table: Mapping[str, str], kind: SlotKind = SlotKind.TEXT) -> None:
        self._forms = PlaceholderForms(table)
        self._writer = SlotWriter(self._forms, kind)
        self._pending: list[object] = []

    @property
    def held(self) -> int:
        """Entries currently held back."""
        return len(self._pending)

    def feed(self, entries: Sequence[E], token_of: TokenOf[E], rebuild: Rebuild[E]) -> list[E]:
        if not self._forms:
            return list(entries)
        pending: list[E] = [*self._pending, *entries]  # type: ignore[list-item]
        texts = [token_of(e) for e in pending]
        joined = "".join(texts)
        hold_from = self._forms.hold_from(joined)
        ends = list(accumulate(map(len, texts)))
        emit = bisect_right(ends, hold_from)  # tokens that end at or before the hold point go now
        if emit < len(texts):
            # The token straddling the hold point waits, and so does a placeholder that ends inside it
            # (tokens "<", "EMAIL_1><"): the tokens go only up to the last boundary before its start.
            cut = ends[emit - 1] if emit else 0
            for start, stop, _ in reversed(self._writer.spans(joined[:hold_from], advance=False)):
                if start < cut < stop:
                    emit = bisect_right(ends, start)
                    cut = ends[emit - 1] if emit else 0
        self._pending = list(pending[emit:])
        return self._rewrite(pending[:emit], texts[:emit], rebuild)

    def finish(self, token_of: TokenOf[E], rebuild: Rebuild[E]) -> list[E]:
        pending: list[E] = self._pending  # type: ignore[assignment]
        self._pending = []
        return self._rewrite(pending, [token_of(e) for e in pending], rebuild)

    def _rewrite(self, entries: list[E], texts: list[str], rebuild: Rebuild[E]) -> list[E]:
        joined = "".join(texts)
        spans = self._writer.spans(joined)
        if not spans:
            return entries
        out: list[E] = []
        j, start = 0, 0
        for entry, text in zip(entries, texts, strict=True):
            stop = start + len(text)
            parts: list[str] = []
            spanned = False
            pos = start
            while pos < stop:
                while j < len(spans) and spans[j][1] <= pos:
                    j += 1
                if j < len(spans) and spans[j][0] <= pos:  # inside placeholder j
                    first, last, value = spans[j]
                    if pos == first:
                        parts.append(value)
                    spanned = True
                    pos = min(stop, last)
                else:
                    nxt = min(stop, spans[j][0]) if j < len(spans) else stop
                    parts.append(joined[pos:nxt])
                    pos = nxt
            out.append(rebuild(entry, "".join(parts), True) if spanned else entry)
            start = stop
        return out
