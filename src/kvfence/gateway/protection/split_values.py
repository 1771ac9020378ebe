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
is put together too: the window after a boundary runs on through the following texts, up to
:data:`MAX_SLOTS_JOINED` of them and :data:`WINDOW_CHARS` characters, and each text the value touches
gets its piece.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from kvfence.gateway.protection.findings import Category, Finding, resolve_overlaps
from kvfence.gateway.protection.messages import TextSlot

__all__ = ["MAX_SLOTS_JOINED", "WINDOW_CHARS", "merge_split", "split_findings"]

# Characters taken from each side of a boundary: longer than any single-line secret or personal
# value the rules know (a PEM block split in two is left to its header line's own rule).
WINDOW_CHARS = 512
# Texts one window runs across after its boundary (a key sent a few characters per message).
MAX_SLOTS_JOINED = 64


def _same_content(a: TextSlot, b: TextSlot) -> bool:
    """Two consecutive text parts of one message's ``content`` list."""
    return (len(a.path) == 5 and len(b.path) == 5 and a.path[0] == b.path[0] == "messages"
            and a.path[1] == b.path[1] and a.path[2] == b.path[2] == "content")


def split_findings(scan: Callable[[str], list[Finding]], slots: Sequence[TextSlot]) -> dict[int, list[Finding]]:
    """Pieces of values that run across the boundaries of consecutive slots, by slot index.

    Positions are global (the slots' texts laid end to end), so a value found from two windows is
    one candidate, and overlapping candidates are resolved once, as within one text."""
    bases = [0]
    for slot in slots:
        bases.append(bases[-1] + len(slot.text))
    candidates: list[Finding] = []
    for k in range(len(slots) - 1):
        left = slots[k].text
        if not left:
            continue
        head = left[-WINDOW_CHARS:]
        parts, budget, last = [head], WINDOW_CHARS, k
        for j in range(k + 1, min(len(slots), k + 1 + MAX_SLOTS_JOINED)):
            piece = slots[j].text[:budget]
            parts.append(piece)
            budget -= len(piece)
            last = j
            if budget <= 0:
                break
        window, cut = "".join(parts), len(head)
        if len(window) == cut:
            continue
        offset = bases[k + 1] - cut  # global position of window[0]
        for f in scan(window):
            # a value is found from the window of the first boundary it crosses
            if not f.start < cut < f.end:
                continue
            start, end = offset + f.start, offset + f.end
            if f.category is not Category.SECRET and not all(
                    _same_content(slots[j], slots[j + 1]) for j in range(k, last) if bases[j + 1] < end):
                continue
            candidates.append(Finding(start, end, f.entity, f.category, f.score, f.rule,
                                      value=f.value if f.value is not None else window[f.start:f.end]))
    pieces: dict[int, list[Finding]] = {}
    for f in resolve_overlaps(candidates):
        first = True
        for j in range(bisect.bisect_right(bases, f.start) - 1, len(slots)):
            if bases[j] >= f.end:
                break
            lo, hi = max(f.start, bases[j]) - bases[j], min(f.end, bases[j + 1]) - bases[j]
            if hi <= lo:
                continue
            pieces.setdefault(j, []).append(Finding(lo, hi, f.entity, f.category, f.score, f.rule,
                                                    value=f.value, continued=not first))
            first = False
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
