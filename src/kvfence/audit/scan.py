"""Find another tenant's text in an answer (pure): exact canaries and long word n-grams.

A canary is exact evidence. Word n-grams catch a leak that returns the victim's prompt without its
canary (e.g. a tail of it); they are built from the victim's random-letter prompts, where a
12-letter run has ~1e-20 odds of appearing by chance.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["LeakHit", "SecretIndex"]

_NGRAM = 12
_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class LeakHit:
    """One piece of a victim's request found in an answer."""

    kind: str  # "canary" or "ngram"
    matched: str
    source_request: str


class SecretIndex:
    """The victim's canaries and prompt n-grams, each mapped to the request that carried it."""

    def __init__(self, ngram: int = _NGRAM) -> None:
        self.ngram = ngram
        self._canaries: dict[str, str] = {}
        self._ngrams: dict[tuple[str, ...], str] = {}

    def __len__(self) -> int:
        return len(self._canaries)

    def add(self, request_id: str, prompt: str, canaries: Iterable[str]) -> None:
        for canary in canaries:
            self._canaries[canary.upper()] = request_id
        words = _words(prompt)
        for i in range(len(words) - self.ngram + 1):
            self._ngrams.setdefault(tuple(words[i : i + self.ngram]), request_id)

    def scan(self, text: str, *, exclude: Iterable[str] = ()) -> list[LeakHit]:
        """Every canary or n-gram of the index found in ``text``; ``exclude`` lists the caller's own requests."""
        excluded = set(exclude)
        hits: list[LeakHit] = []
        squashed = re.sub(r"\s+", "", text).upper()
        for canary, source in self._canaries.items():
            if source not in excluded and canary in squashed:
                hits.append(LeakHit("canary", canary, source))
        words = _words(text)
        seen: set[str] = set()
        for i in range(len(words) - self.ngram + 1):
            found = self._ngrams.get(tuple(words[i : i + self.ngram]))
            if found is not None and found not in excluded and found not in seen:
                seen.add(found)
                hits.append(LeakHit("ngram", " ".join(words[i : i + self.ngram]), found))
        return hits


def _words(text: str) -> list[str]:
    return _WORD.findall(text)
