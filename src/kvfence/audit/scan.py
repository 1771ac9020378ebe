"""Find another tenant's text in an answer (pure): exact canaries and runs of the victim's words.

A canary is exact evidence. Word runs catch a leak that returns a piece of the victim's prompt
without its canary. The victim's prompt words are drawn uniformly at random from a vocabulary of
``V`` words, independently of everything the other tenant sends and receives, so a given run of
``n`` words of an answer equals a given run of the victim's prompt with probability ``V**-n``. Over
``A`` answer positions and ``P`` prompt positions the chance of any false alarm is at most
``A * P * V**-n`` (the union bound), whatever the model writes. :func:`shortest_run` picks the
shortest ``n`` whose bound stays under the chosen false-alarm rate, and
:meth:`SecretIndex.false_alarm_bound` gives the bound for what was actually scanned.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["DEFAULT_FALSE_ALARM", "LeakHit", "SecretIndex", "false_alarm_bound", "shortest_run"]

DEFAULT_FALSE_ALARM = 1e-6
_MIN_RUN = 3
_WORD = re.compile(r"\S+")


def false_alarm_bound(vocab_size: int, run: int, prompt_positions: int, answer_positions: int) -> float:
    """Upper bound on P(any run of ``run`` answer words equals a run of the victim's random words)."""
    if prompt_positions <= 0 or answer_positions <= 0:
        return 0.0
    return min(1.0, math.exp(math.log(prompt_positions) + math.log(answer_positions) - run * math.log(vocab_size)))


def shortest_run(vocab_size: int, prompt_positions: int, answer_positions: int,
                 false_alarm: float = DEFAULT_FALSE_ALARM) -> int:
    """The shortest run length (at least 3 words) whose false-alarm bound is at most ``false_alarm``."""
    if vocab_size < 2:
        raise ValueError("the vocabulary needs at least two words")
    run = _MIN_RUN
    while false_alarm_bound(vocab_size, run, prompt_positions, answer_positions) > false_alarm:
        run += 1
    return run


@dataclass(frozen=True, slots=True)
class LeakHit:
    """One piece of a victim's request found in an answer."""

    kind: str  # "canary" or "ngram"
    matched: str
    source_request: str


class SecretIndex:
    """The victim's canaries and prompt word runs, each mapped to the request that carried it.

    ``ngram`` is the run length that counts as a leak; ``vocab_size`` is the size of the random
    vocabulary the indexed prompts were drawn from (for the false-alarm bound).
    """

    def __init__(self, ngram: int = 12, vocab_size: int = 52) -> None:
        self.ngram = ngram
        self.vocab_size = vocab_size
        self._canaries: dict[str, str] = {}
        self._ngrams: dict[tuple[str, ...], str] = {}
        self._requests: dict[str, int] = {}  # request id -> prompt positions indexed
        self.answer_positions = 0  # word positions scanned so far

    def __len__(self) -> int:
        return len(self._canaries)

    def add(self, request_id: str, prompt: str, canaries: Iterable[str]) -> None:
        """Index ``prompt`` (random words of the vocabulary only) and ``canaries`` under ``request_id``."""
        for canary in canaries:
            self._canaries[canary.upper()] = request_id
        words = _words(prompt)
        positions = max(0, len(words) - self.ngram + 1)
        self._requests[request_id] = self._requests.get(request_id, 0) + positions
        for i in range(positions):
            self._ngrams.setdefault(tuple(words[i : i + self.ngram]), request_id)

    def false_alarm_bound(self) -> float:
        """Bound on the chance that any run found so far (or later, at this volume) came by chance."""
        return false_alarm_bound(self.vocab_size, self.ngram, sum(self._requests.values()), self.answer_positions)

    def scan(self, text: str, *, exclude: Iterable[str] = ()) -> list[LeakHit]:
        """Every canary or word run of the index found in ``text``; ``exclude`` lists the caller's own requests."""
        excluded = set(exclude)
        hits: list[LeakHit] = []
        squashed = re.sub(r"\s+", "", text).upper()
        for canary, source in self._canaries.items():
            if source not in excluded and canary in squashed:
                hits.append(LeakHit("canary", canary, source))
        words = _words(text)
        positions = max(0, len(words) - self.ngram + 1)
        # Only other requests' positions can raise a false alarm; the caller's own are not compared.
        self.answer_positions += positions
        seen: set[str] = set()
        for i in range(positions):
            found = self._ngrams.get(tuple(words[i : i + self.ngram]))
            if found is not None and found not in excluded and found not in seen:
                seen.add(found)
                hits.append(LeakHit("ngram", " ".join(words[i : i + self.ngram]), found))
        return hits


def _words(text: str) -> list[str]:
    return _WORD.findall(text)
