"""When to stop measuring one cache-sharing level, and what it showed (pure, no I/O).

A level is measured in growing looks (10, 15, 23, ... samples per procedure, up to ``--samples``).
After each look one of three things is true:

* **shares**: the one-sided KS test (hits faster, ``stats.compare_timings``) is significant at
  ``alpha / looks`` (Bonferroni over the looks, so stopping early does not raise the false
  "shares" rate above ``alpha``);
* **not shared**: the test has shown it *would* have seen sharing. The same-key level, where a hit
  is certain, measures what a shared cache does to TTFT: its KS distance D, whose true value is at
  least ``D_ref`` with confidence (the Dvoretzky–Kiefer–Wolfowitz bound, below). If this level
  shared a cache its true distance would be at least ``D_ref`` as well, and its observed distance
  would be within the DKW margins of it; an observed distance below ``D_ref`` minus both margins
  rules sharing out, wrong with probability at most ``beta`` (over every look);
* **undecided**: neither yet. At the last look, or when the time budget runs out, the level is
  *inconclusive*, never a pass: too few samples cannot show that sharing would have been seen.

DKW (Massart's constant): an empirical CDF of ``n`` samples is within
``sqrt(ln(1/delta) / (2 n))`` of the true CDF on one side, everywhere, with probability
``1 - delta``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvfence.errors import ConfigError

if TYPE_CHECKING:
    from kvfence.audit.stats import TimingComparison

__all__ = ["LevelDecision", "SequentialPlan", "dkw_margin", "look_sizes"]

_FIRST_LOOK = 10
_GROWTH = 1.5


class LevelDecision(enum.StrEnum):
    SHARES = "shares"
    NOT_SHARED = "not shared"
    UNDECIDED = "undecided"


def look_sizes(max_samples: int, first: int = _FIRST_LOOK, growth: float = _GROWTH) -> tuple[int, ...]:
    """Samples per procedure at each look: ``first``, then ``growth`` times more, ending at ``max_samples``."""
    if max_samples < 2:
        raise ConfigError(f"--samples must be at least 2, got {max_samples}")
    sizes: list[int] = []
    n = float(min(first, max_samples))
    while round(n) < max_samples:
        sizes.append(round(n))
        n *= growth
    sizes.append(max_samples)
    return tuple(sizes)


def dkw_margin(n: int, delta: float) -> float:
    """One-sided DKW margin of an empirical CDF of ``n`` samples at confidence ``1 - delta``."""
    return math.sqrt(math.log(1.0 / delta) / (2.0 * n))


@dataclass(frozen=True, slots=True)
class SequentialPlan:
    """The looks of a level and the per-look error rates; ``fixed`` makes one look at ``max_samples``."""

    alpha: float
    beta: float
    looks: tuple[int, ...]

    @classmethod
    def build(cls, max_samples: int, alpha: float, beta: float, *, fixed: bool = False) -> SequentialPlan:
        if not 0.0 < beta < 1.0:
            raise ConfigError(f"--beta must be in (0, 1), got {beta}")
        return cls(alpha, beta, (max_samples,) if fixed else look_sizes(max_samples))

    @property
    def alpha_per_look(self) -> float:
        return self.alpha / len(self.looks)

    @property
    def delta(self) -> float:
        # Two empirical CDFs per look, each allowed to miss its margin with probability delta.
        return self.beta / (2 * len(self.looks))

    def margins(self, comparison: TimingComparison) -> float:
        return dkw_margin(comparison.n_hit, self.delta) + dkw_margin(comparison.n_miss, self.delta)

    def reference_effect(self, same_key: TimingComparison) -> float:
        """A lower confidence bound on the KS distance a shared cache causes (from the same-key level)."""
        return max(0.0, same_key.ks_statistic - self.margins(same_key))

    def decide(self, comparison: TimingComparison, reference: float | None) -> LevelDecision:
        """The state of a level after a look; ``reference`` is None for the same-key level itself."""
        if comparison.detects_cache(self.alpha_per_look):
            return LevelDecision.SHARES
        if reference is not None and comparison.ks_statistic + self.margins(comparison) < reference:
            return LevelDecision.NOT_SHARED
        return LevelDecision.UNDECIDED

    def reference_settled(self, same_key: TimingComparison) -> bool:
        """Whether the same-key level may stop: hits detected, and its bound at least half its distance.

        Stopping at the first significant look would leave a loose bound, and every other level
        would need many more samples to fall under it.
        """
        return (self.decide(same_key, None) is LevelDecision.SHARES
                and self.reference_effect(same_key) >= 0.5 * same_key.ks_statistic)
