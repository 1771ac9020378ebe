"""Prompt material for the checks: random text of a chosen token length, and canaries.

Random prompts follow Gu et al. (ICML 2025): single ASCII letters separated by spaces. Each letter
is one "unit"; most tokenizers spend a fixed number of tokens per unit, so a linear fit of the
endpoint's reported ``prompt_tokens`` against units (:class:`TokenModel`) lets the checks ask for a
prompt of a given token length without the endpoint's tokenizer.
"""

from __future__ import annotations

import math
import random
import string
from dataclasses import dataclass

__all__ = ["CANARY_ALPHABET", "LETTERS", "SYLLABLES", "TokenModel", "distinctive_units", "make_canary",
           "random_units", "spaced"]

LETTERS = string.ascii_letters
# The leak check's victim words: consonant-vowel-consonant syllables, 19 * 5 * 19 = 1,805 of them,
# a vocabulary 35x the letters', so a run of a few of them in an answer is already improbable by
# chance (scan.false_alarm_bound). No single letters: the other tenant's prompts are letters, so
# nothing it sends or is likely to get back is drawn from this vocabulary.
_CONSONANTS = "bcdfghjklmnpqrstvwxz"[:19]
SYLLABLES = tuple(c + v + d for c in _CONSONANTS for v in "aeiou" for d in _CONSONANTS)
# No 0/O or 1/I/L, so a canary survives being read back by a human or re-typed by a model.
CANARY_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"


def random_units(rng: random.Random, count: int) -> list[str]:
    """``count`` random letters; join them with spaces to get a prompt."""
    return [rng.choice(LETTERS) for _ in range(count)]


def distinctive_units(rng: random.Random, count: int) -> list[str]:
    """``count`` random syllables of :data:`SYLLABLES` (the leak check's victim prompts)."""
    return [rng.choice(SYLLABLES) for _ in range(count)]


def make_canary(rng: random.Random, length: int = 14) -> str:
    """A unique marker that no model produces by chance (31**14 ~ 7e20 values)."""
    return "KVFCANARY" + "".join(rng.choice(CANARY_ALPHABET) for _ in range(length))


@dataclass(frozen=True, slots=True)
class TokenModel:
    """``prompt_tokens ~= overhead + tokens_per_unit * units``, fitted from the endpoint's usage."""

    overhead: float
    tokens_per_unit: float
    exact: bool = False

    @classmethod
    def fit(cls, samples: list[tuple[int, int]]) -> TokenModel:
        """Least-squares fit of ``(units, prompt_tokens)`` pairs; ``exact`` if every pair lies on it."""
        if len(samples) < 2 or len({u for u, _ in samples}) < 2:
            raise ValueError("need prompt_tokens for at least two different prompt lengths")
        n = len(samples)
        mean_u = sum(u for u, _ in samples) / n
        mean_t = sum(t for _, t in samples) / n
        var_u = sum((u - mean_u) ** 2 for u, _ in samples)
        slope = sum((u - mean_u) * (t - mean_t) for u, t in samples) / var_u
        if slope <= 0:
            raise ValueError("prompt_tokens does not grow with the prompt; the endpoint's usage is unusable")
        intercept = mean_t - slope * mean_u
        exact = all(abs(intercept + slope * u - t) < 0.5 for u, t in samples) and abs(slope - round(slope)) < 1e-9
        return cls(overhead=intercept, tokens_per_unit=slope, exact=exact)

    def tokens(self, units: int) -> int:
        return round(self.overhead + self.tokens_per_unit * units)

    def units_for(self, tokens: int) -> int:
        """The most units whose prompt is at most ``tokens`` tokens (at least 1)."""
        units = max(1, math.floor((tokens - self.overhead) / self.tokens_per_unit + 1e-9))
        while units > 1 and self.tokens(units) > tokens:
            units -= 1
        return units

    def units_over(self, tokens: int) -> int:
        """The fewest units whose prompt is longer than ``tokens`` tokens."""
        units = self.units_for(tokens)
        while self.tokens(units) <= tokens:
            units += 1
        return units


def spaced(text: str) -> list[str]:
    """``text`` as units (one character each), so a canary costs tokens like the random letters do."""
    return list(text)
