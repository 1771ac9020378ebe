"""What a detector reports: a typed span of a text.

A :class:`Finding` is pure data: the detectors produce them, the pseudonymiser consumes them, and the
audit log records only their types and counts, never the matched text.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass

__all__ = ["Category", "Finding", "resolve_overlaps"]


class Category(enum.Enum):
    """The two families of protected data; they differ in what may be restored in an answer."""

    PII = "pii"        # personal data: pseudonymised, restored in the answer for the same caller
    SECRET = "secret"  # credentials: replaced, never restored


@dataclass(frozen=True, slots=True)
class Finding:
    """A span ``text[start:end]`` recognised as ``entity`` (e.g. ``EMAIL_ADDRESS``, ``AWS_ACCESS_KEY``)."""

    start: int
    end: int
    entity: str
    category: Category
    score: float
    rule: str
    # A value split across two texts of one request (``split_values.py``): the first piece carries the
    # whole value (what its placeholder stands for), the later piece is removed (``continued``).
    value: str | None = None
    continued: bool = False

    @property
    def length(self) -> int:
        return self.end - self.start


def _rank(finding: Finding) -> tuple[int, int, float]:
    # Secrets beat personal data on the same bytes (a password inside a URL is a secret first),
    # then the longer span, then the more confident one.
    return (1 if finding.category is Category.SECRET else 0, finding.length, finding.score)


def resolve_overlaps(findings: list[Finding]) -> list[Finding]:
    """Keep a set of non-overlapping findings, preferring secrets, then longer, then surer spans.

    The result is sorted by ``start``. Greedy by rank is enough here: spans are short and a
    lower-ranked span that overlaps a kept one is always dropped whole, never cut.
    """
    starts: list[int] = []  # kept spans, sorted and disjoint: starts[i] < ends[i] <= starts[i+1]
    ends: list[int] = []
    kept: list[Finding] = []
    for finding in sorted(findings, key=_rank, reverse=True):
        if finding.length <= 0:
            continue
        i = bisect.bisect_right(starts, finding.start)
        if i > 0 and ends[i - 1] > finding.start:
            continue  # overlaps the kept span that starts at or before it
        if i < len(starts) and starts[i] < finding.end:
            continue  # overlaps the kept span that starts after it
        starts.insert(i, finding.start)
        ends.insert(i, finding.end)
        kept.insert(i, finding)
    return kept
