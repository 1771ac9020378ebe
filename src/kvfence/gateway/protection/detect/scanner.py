"""A detection rule (precompiled regex + validator + context) and the scanner that runs a rule set.

Rules are plain data compiled once at import. The scanner is the hot path of the gateway's data
protection, so a rule is skipped outright when none of its lowercase literal ``hints`` occur in the
text, and a rule with an :class:`Anchor` runs its full regex only in small windows around the
anchor's matches (every digit-shaped rule shares one anchor, found once per text), instead of
walking every position of a 32k-token prompt once per rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kvfence.gateway.protection.detect.findings import Category, Finding, resolve_overlaps

__all__ = ["Anchor", "Rule", "RuleSet", "lowered_aligned"]

CONTEXT_WINDOW = 48  # characters before a candidate searched for a context word


@dataclass(frozen=True)
class Anchor:
    """A cheap regex locating where a rule can match; the rule runs in ``[m-before, m+after)``."""

    pattern: re.Pattern[str]
    before: int
    after: int

    def windows(self, text: str) -> list[tuple[int, int]]:
        merged: list[tuple[int, int]] = []
        size = len(text)
        for match in self.pattern.finditer(text):
            start, end = max(0, match.start() - self.before), min(size, match.end() + self.after)
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged


@dataclass(frozen=True)
class Rule:
    """One way of recognising one entity.

    ``accept`` refines a candidate: it returns how many leading characters of the candidate are the
    entity (``None`` to reject); ``validate`` is the simpler yes/no form. ``hints`` are lowercase
    literals of which at least one must occur in the lowercased text for the rule to run at all.
    ``context`` words, with ``needs_context``, must occur just before the candidate (a bare
    nine-digit number is only a national ID when the text says so), each at the start of a word
    ("tel" in "Tel.:" and "telefon", not in "Bestellung"; "sin" not in "using"), unless the group
    ``context_waived_by`` matched (a street line needs a cue word, the same line with its postcode not). ``on_lowered`` runs the regex
    on the lowercased text (same offsets), which is much faster than ``re.IGNORECASE``.
    """

    name: str
    entity: str
    category: Category
    pattern: re.Pattern[str]
    score: float = 0.9
    group: int | str | tuple[str, ...] = 0  # a tuple: the first of these groups that matched
    validate: Callable[[str], bool] | None = None
    accept: Callable[[str], int | None] | None = None
    hints: tuple[str, ...] = ()
    anchor: Anchor | None = None
    context: tuple[str, ...] = ()
    needs_context: bool = False
    reject_before: re.Pattern[str] | None = None
    reject_value: Callable[[str], bool] | None = None
    on_lowered: bool = False
    context_waived_by: str | None = None  # a named group that, when it matched, makes context unnecessary
    _context_re: re.Pattern[str] | None = field(init=False, default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.context:
            words = "|".join(re.escape(w) for w in sorted(self.context, key=len, reverse=True))
            object.__setattr__(self, "_context_re", re.compile(rf"(?<![^\W\d_])(?:{words})"))

    def applies(self, lowered: str) -> bool:
        return not self.hints or any(hint in lowered for hint in self.hints)

    def find(self, text: str, lowered: str, pos: int = 0, endpos: int | None = None) -> list[Finding]:
        found: list[Finding] = []
        subject = lowered if self.on_lowered else text
        for match in self.pattern.finditer(subject, pos, len(text) if endpos is None else endpos):
            if isinstance(self.group, tuple):
                start, end = next((match.span(g) for g in self.group if match.start(g) >= 0), (-1, -1))
            else:
                start, end = match.span(self.group)
            if start < 0 or end <= start:
                continue
            value = text[start:end]
            if self.accept is not None:
                length = self.accept(value)
                if length is None:
                    continue
                end = start + length
                value = text[start:end]
            if self.validate is not None and not self.validate(value):
                continue
            if self.reject_value is not None and self.reject_value(value):
                continue
            before = lowered[max(0, start - CONTEXT_WINDOW):start]
            if self.reject_before is not None and self.reject_before.search(before):
                continue
            if self.needs_context and (self._context_re is None or not self._context_re.search(before)) \
                    and not (self.context_waived_by and match.start(self.context_waived_by) >= 0):
                continue
            found.append(Finding(start, end, self.entity, self.category, self.score, self.name))
        return found


def lowered_aligned(text: str) -> str:
    """``text.lower()`` with the same length (a few characters lower to two; keep offsets aligned)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = "".join(ch.lower()[:1] or ch for ch in text)
    return lowered


@dataclass
class RuleSet:
    """An ordered set of rules; :meth:`scan` returns non-overlapping findings sorted by position."""

    rules: Sequence[Rule]
    disabled: frozenset[str] = field(default_factory=frozenset)

    def entities(self) -> set[str]:
        return {rule.entity for rule in self.rules}

    def raw_findings(self, text: str) -> list[Finding]:
        """Every finding of every enabled rule (overlapping), each span reported once per rule."""
        lowered = lowered_aligned(text)
        windows: dict[Anchor, list[tuple[int, int]]] = {}
        found: list[Finding] = []
        for rule in self.rules:
            if rule.entity in self.disabled or rule.name in self.disabled or not rule.applies(lowered):
                continue
            if rule.anchor is None:
                found.extend(rule.find(text, lowered))
                continue
            if rule.anchor not in windows:
                windows[rule.anchor] = rule.anchor.windows(text)
            for start, end in windows[rule.anchor]:
                found.extend(rule.find(text, lowered, start, end))
        return found

    def scan(self, text: str) -> list[Finding]:
        return resolve_overlaps(self.raw_findings(text))

    def only(self, entities: Iterable[str]) -> RuleSet:
        wanted = set(entities)
        return RuleSet([rule for rule in self.rules if rule.entity in wanted], self.disabled)
