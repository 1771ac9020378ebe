"""When to stop measuring one cache-sharing level, and what it showed (pure, no I/O).

A level is measured in growing looks (10, 15, 23, ... samples per procedure, up to ``--samples``).
After each look one of three things is true:

* **shares**: the one-sided KS test (hits faster, ``stats.compare_timings``) is significant at
  ``alpha / looks`` (Bonferroni over the looks, so stopping early does not raise the false
  "shares" rate above ``alpha``);
* **not shared**: the test has shown it *would* have seen sharing. The same-key level, where a hit
  is certain, shows what a hit through a shared cache looks like. If this level shared the cache
  the same way, its hit probes would be as fast as the same-key hits; a one-sided KS test that
  finds them slower at ``beta / looks`` rules sharing out, wrong with probability at most ``beta``
  (the chance of calling a level unshared although it shares like the same key does). As a guard
  against drift (a server that slows down between levels would make shared hits look slower than
  the earlier same-key ones), the level's own hits, interleaved with its own misses, must also be
  less than half as far from them (KS distance) as the same-key hits were from theirs;
* **undecided**: neither yet. At the last look, or when the time budget runs out, the level is
  *inconclusive*, never a pass: too few samples cannot show that sharing would have been seen.

The same-key level itself keeps measuring after its hits are detected until ``reference_settled``
(at least 34 samples per procedure), so that the picture of a hit the other levels are compared
with is not drawn from a handful of samples.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvfence.errors import ConfigError

if TYPE_CHECKING:
    from kvfence.audit.stats import TimingComparison

__all__ = ["LevelDecision", "SequentialPlan", "look_sizes"]

_FIRST_LOOK = 10
_MIN_REFERENCE = 34
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
    def beta_per_look(self) -> float:
        return self.beta / len(self.looks)

    def decide(self, comparison: TimingComparison, unlike_reference: TimingComparison | None = None,
               reference_distance: float | None = None) -> LevelDecision:
        """The state of a level after a look.

        ``comparison``: this level's hits against its misses. ``unlike_reference``: the same-key
        level's hits against this level's hits (None for the same-key level itself); significant
        means this level's hits are slower than hits through a shared cache. ``reference_distance``:
        the same-key level's hit-vs-miss KS distance (the drift guard).
        """
        if comparison.detects_cache(self.alpha_per_look):
            return LevelDecision.SHARES
        if (unlike_reference is not None and reference_distance is not None
                and unlike_reference.detects_cache(self.beta_per_look)
                and comparison.ks_statistic < 0.5 * reference_distance):
            return LevelDecision.NOT_SHARED
        return LevelDecision.UNDECIDED

    def reference_settled(self, same_key: TimingComparison) -> bool:
        """Whether the same-key level may stop: hits detected, on at least 34 samples per procedure."""
        return (self.decide(same_key, None) is LevelDecision.SHARES
                and min(same_key.n_hit, same_key.n_miss) >= min(_MIN_REFERENCE, self.looks[-1]))
