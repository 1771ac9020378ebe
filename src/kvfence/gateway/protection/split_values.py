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
over three or more texts is not put together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvfence.gateway.protection.findings import Category, Finding, resolve_overlaps
from kvfence.gateway.protection.messages import TextSlot

__all__ = ["WINDOW_CHARS", "merge_split", "split_findings"]

# Characters taken from each side of a boundary: longer than any single-line secret or personal
# value the rules know (a PEM block split in two is left to its header line's own rule).
WINDOW_CHARS = 512


def _same_content(a: TextSlot, b: TextSlot) -> bool:
    """Two consecutive text parts of one message's ``content`` list."""
    return (len(a.path) == 5 and len(b.path) == 5 and a.path[0] == b.path[0] == "messages"
            and a.path[1] == b.path[1] and a.path[2] == b.path[2] == "content")


def split_findings(scan: Callable[[str], list[Finding]], slots: Sequence[TextSlot]) -> dict[int, list[Finding]]:
    """Pieces of values that run across the boundary of consecutive slots, by slot index."""
    pieces: dict[int, list[Finding]] = {}
    for k in range(len(slots) - 1):
        left, right = slots[k].text, slots[k + 1].text
        if not left or not right:
            continue
        head, tail = left[-WINDOW_CHARS:], right[:WINDOW_CHARS]
        window, cut = head + tail, len(head)
        any_kind = _same_content(slots[k], slots[k + 1])
        for f in scan(window):
            if not f.start < cut < f.end or not (any_kind or f.category is Category.SECRET):
                continue
            offset = len(left) - cut
            value = window[f.start:f.end]
            pieces.setdefault(k, []).append(Finding(offset + f.start, len(left), f.entity, f.category, f.score,
                                                    f.rule, value=value))
            pieces.setdefault(k + 1, []).append(Finding(0, f.end - cut, f.entity, f.category, f.score, f.rule,
                                                        value=value, continued=True))
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
