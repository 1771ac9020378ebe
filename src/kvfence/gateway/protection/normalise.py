"""Fold the Unicode disguises of a text before detection, keeping a map back to the caller's text.

A value a detector knows can be hidden from a pattern without changing what a reader (or a model)
sees: full-width digits (``４１１１ １１１１ …``), a zero-width space, word joiner or soft hyphen
inside an e-mail, IBAN or API key, a no-break space between phone digit groups, a non-breaking or
figure dash, ``＠`` / ``﹫`` for ``@``. :func:`fold` removes the invisible characters and maps the
others to their plain (NFKC) form; detectors run on the folded text, and :meth:`Folded.span` maps each
finding back to the caller's characters, so a placeholder replaces exactly what the caller wrote and
its restoration puts that original text back. ASCII text, and text whose non-ASCII characters need no
folding (accents, CJK), is returned as it is, at the cost of one ``isascii`` / one regex scan.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["INVISIBLE", "Folded", "fold"]

# Characters that render as nothing (or only at a line break) but split a token for a regex.
INVISIBLE = frozenset("\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u200b\u200c\u200d"
                      "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067"
                      "\u2068\u2069\u206a\u206b\u206c\u206d\u206e\u206f\u3164\ufeff\uffa0")
# Dashes NFKC leaves alone that a reader takes for "-" (phone groups, IBAN groups, dates).
_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2043\u2212\ufe58\ufe63\uff0d"), "-")
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
_SPECIAL = re.compile("[" + re.escape("".join(sorted(INVISIBLE)) + "".join(map(chr, _DASHES))) + "]")


def _fold_char(ch: str) -> str:
    if ch in INVISIBLE:
        return ""
    folded = unicodedata.normalize("NFKC", ch).translate(_DASHES)
    # NFKC turns a few characters into several ("ﬁ" -> "fi", "½" -> "1⁄2"); a combining mark alone
    # would fold to itself. Either way each output character maps back to this one.
    return folded


@dataclass(frozen=True, slots=True)
class Folded:
    """A folded text and, when folding changed it, the original index of each of its characters."""

    text: str
    original: str
    origin: tuple[int, ...] | None = None

    @property
    def changed(self) -> bool:
        return self.origin is not None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The caller's characters ``[start, end)`` of the folded text came from (invisible characters
        inside the span are included, those just outside it are not)."""
        if self.origin is None or start >= end:
            return start, end
        return self.origin[start], self.origin[end - 1] + 1


def fold(text: str) -> Folded:
    """``text`` with invisible characters removed and compatibility forms (full-width, no-break
    spaces, odd dashes, ``＠``) made plain; ``origin`` maps back (None when nothing changed)."""
    if text.isascii():
        return Folded(text, text)
    runs = [m for m in _NON_ASCII_RUN.finditer(text) if _needs_folding(m.group(0))]
    if not runs:
        return Folded(text, text)
    pieces: list[str] = []
    origin: list[int] = []
    cursor = 0
    for match in runs:
        start, end = match.span()
        pieces.append(text[cursor:start])
        origin.extend(range(cursor, start))
        for i in range(start, end):
            folded = _fold_char(text[i])
            pieces.append(folded)
            origin.extend([i] * len(folded))
        cursor = end
    pieces.append(text[cursor:])
    origin.extend(range(cursor, len(text)))
    return Folded("".join(pieces), text, tuple(origin))


def _needs_folding(run: str) -> bool:
    # both checks run in C: accented or CJK prose costs no per-character Python
    return _SPECIAL.search(run) is not None or not unicodedata.is_normalized("NFKC", run)
