"""Statistics of the cache-sharing audit: compare hit and miss TTFT samples (pure, no I/O).

The test is the one-sided two-sample Kolmogorov–Smirnov test of Gu et al. (ICML 2025): the null
hypothesis is that the cache-hit procedure is not faster than the cache-miss procedure; a small
p-value means hits are faster, i.e. the attacker's prompt found the victim's prefix in a cache.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = ["TimingComparison", "compare_timings"]


@dataclass(frozen=True, slots=True)
class TimingComparison:
    """KS test result and effect sizes for one sharing level (times in milliseconds)."""

    n_hit: int
    n_miss: int
    ks_statistic: float
    p_value: float
    median_hit_ms: float
    median_miss_ms: float
    median_diff_ms: float
    mean_hit_ms: float
    mean_miss_ms: float
    prob_hit_faster: float
    frac_hit_below_min_miss: float

    def detects_cache(self, alpha: float) -> bool:
        """Significant at ``alpha`` and in the direction a cache would cause (hits faster)."""
        return self.p_value < alpha and self.median_hit_ms < self.median_miss_ms

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compare_timings(hit_s: list[float], miss_s: list[float]) -> TimingComparison:
    """One-sided KS test (H1: hit TTFTs are stochastically smaller) plus effect sizes."""
    if len(hit_s) < 2 or len(miss_s) < 2:
        raise ValueError("need at least two hit and two miss samples")
    hit = np.asarray(hit_s, dtype=float) * 1000.0
    miss = np.asarray(miss_s, dtype=float) * 1000.0
    # alternative="greater": the empirical CDF of hits lies above that of misses somewhere,
    # which is what "hits are faster" means for a distribution.
    result = stats.ks_2samp(hit, miss, alternative="greater", method="auto")
    # Common-language effect size: P(random hit < random miss), ties counted half.
    diff = hit[:, None] - miss[None, :]
    prob_faster = float(np.mean(diff < 0) + 0.5 * np.mean(diff == 0))
    return TimingComparison(
        n_hit=int(hit.size),
        n_miss=int(miss.size),
        ks_statistic=float(result.statistic),
        p_value=float(result.pvalue),
        median_hit_ms=float(np.median(hit)),
        median_miss_ms=float(np.median(miss)),
        median_diff_ms=float(np.median(miss) - np.median(hit)),
        mean_hit_ms=float(hit.mean()),
        mean_miss_ms=float(miss.mean()),
        prob_hit_faster=prob_faster,
        frac_hit_below_min_miss=float(np.mean(hit < miss.min())),
    )
