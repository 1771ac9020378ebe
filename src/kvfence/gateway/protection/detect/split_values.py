"""Values split across two texts of one request: a secret in two messages, an e-mail in two parts.

Each text of a request is scanned on its own, so ``sk-proj-AbCd`` at the end of one content part and
``EfGh...`` at the start of the next, or an API key spread over two messages, slips past every
pattern, while the model reads the two texts one after the other and can put the value back
together. :func:`split_findings` scans a window around each boundary of consecutive texts and
reports a value that runs across it as two pieces: the first carries the whole value (its
placeholder stands for it), the second is removed.

Which boundaries: the text parts of one message's ``content`` are read as one text by chat templates,
so any finding counts there; across messages (and tool-call arguments, names, schema strings)
only secrets do, because two unrelated texts put side by side make false personal data easily
("order 1234" + "5678 ..." is no card) and a credential's documented shape rarely. A value split
over three or more texts (a key cut into five content parts, or sent a few characters per message)
is put together too: runs of short texts are scanned as one text, once, and a long text takes
part with its first and last :data:`WINDOW_CHARS` characters; each text the value touches gets its
piece.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from kvfence.gateway.protection.detect.findings import Category, Finding, resolve_overlaps
from kvfence.gateway.protection.messages import TextSlot

__all__ = ["WINDOW_CHARS", "merge_split", "split_findings"]

# Characters taken from each side of a boundary: longer than any single-line secret or personal
# value the rules know (a PEM block split in two is left to its header line's own rule).
WINDOW_CHARS = 512


def _same_content(a: TextSlot, b: TextSlot) -> bool:
    """Two consecutive text parts of one message's ``content`` list."""
    return (len(a.path) == 5 and len(b.path) == 5 and a.path[0] == b.path[0] == "messages"
            and a.path[1] == b.path[1] and a.path[2] == b.path[2] == "content")


def _segments(bases: Sequence[int]) -> list[tuple[int, int]]:
    """Global ranges to scan so that every boundary is seen with ``WINDOW_CHARS`` on each side: runs
    of short texts whole, a long text only by its first and last ``WINDOW_CHARS`` characters (no
    value the rules know is longer, so none can run across a long text's middle)."""
    segments: list[tuple[int, int]] = []
    start: int | None = None
    for k in range(len(bases) - 1):
        if bases[k + 1] - bases[k] > 2 * WINDOW_CHARS:
            if start is not None:
                segments.append((start, bases[k] + WINDOW_CHARS))
            start = bases[k + 1] - WINDOW_CHARS
        elif start is None:
            start = bases[k]
    if start is not None:
        segments.append((start, bases[-1]))
    return segments


def split_findings(scan: Callable[[str], list[Finding]], slots: Sequence[TextSlot]) -> dict[int, list[Finding]]:
    """Pieces of values that run across the boundaries of consecutive slots, by slot index.

    Positions are global (the slots' texts laid end to end); each segment of texts is scanned once,
    and a finding counts when it crosses a boundary (across messages, only if it is a secret)."""
    bases = [0]
    for slot in slots:
        bases.append(bases[-1] + len(slot.text))
    candidates: list[Finding] = []
    for lo, hi in _segments(bases):
        first = bisect.bisect_right(bases, lo) - 1  # the slot holding position lo
        last = bisect.bisect_left(bases, hi) - 1     # the slot holding position hi - 1
        if first == last:
            continue  # no boundary inside
        text = "".join(slots[j].text[max(0, lo - bases[j]):hi - bases[j]] for j in range(first, last + 1))
        for f in scan(text):
            start, end = lo + f.start, lo + f.end
            # the boundaries it crosses: bases[j + 1] strictly inside (start, end)
            crossed = range(bisect.bisect_right(bases, start) - 1, bisect.bisect_left(bases, end) - 1)
            if not crossed:
                continue
            if f.category is not Category.SECRET and not all(_same_content(slots[j], slots[j + 1]) for j in crossed):
                continue
            candidates.append(Finding(start, end, f.entity, f.category, f.score, f.rule,
                                      value=f.value if f.value is not None else text[f.start:f.end]))
    pieces: dict[int, list[Finding]] = {}
    for f in resolve_overlaps(candidates):
        first_piece = True
        for j in range(bisect.bisect_right(bases, f.start) - 1, len(slots)):
            if bases[j] >= f.end:
                break
            lo, hi = max(f.start, bases[j]) - bases[j], min(f.end, bases[j + 1]) - bases[j]
            if hi <= lo:
                continue
            pieces.setdefault(j, []).append(Finding(lo, hi, f.entity, f.category, f.score, f.rule,
                                                    value=f.value, continued=not first_piece))
            first_piece = False
    return pieces


def merge_split(per_text: list[list[Finding]], pieces: dict[int, list[Finding]]) -> list[list[Finding]]:
    """``per_text`` with the split pieces added; a piece wins over a finding of one text it overlaps
    (that finding is only part of the value)."""
    if not pieces:
        return per_text
    merged = []
    for k, found in enumerate(per_text):
        extra = pieces.get(k)
        if not extra:
            merged.append(found)
            continue
        kept = [f for f in found if not any(f.start < p.end and p.start < f.end for p in extra)]
        # two pieces in one text (a value ending in it and another starting in it) never overlap
        merged.append(sorted(kept + resolve_overlaps(extra), key=lambda f: f.start))
    return merged
