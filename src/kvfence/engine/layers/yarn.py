"""YaRN's scalar parameters, as transformers derives them (no torch: both runtimes rotate with them).

The frequencies themselves are array arithmetic, in each runtime's library:
:func:`~kvfence.engine.layers.rotary.rope_inverse_frequencies` (torch) and
:func:`~kvfence.engine.native.rope.inverse_frequencies` (NumPy).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["yarn_attention_factor", "yarn_factor", "yarn_original_length", "yarn_ramp"]


def yarn_original_length(scaling: dict[str, Any], max_position_embeddings: int) -> int:
    return int(scaling.get("original_max_position_embeddings") or max_position_embeddings)


def yarn_factor(scaling: dict[str, Any], max_position_embeddings: int) -> float:
    """The stretch: ``factor``, or (left out, as transformers) the one the config's lengths state."""
    if scaling.get("factor") is None:
        return max_position_embeddings / yarn_original_length(scaling, max_position_embeddings)
    return float(scaling["factor"])


def yarn_attention_factor(scaling: dict[str, Any], factor: float) -> float:
    """What cos and sin are multiplied by: ``attention_factor``, or from ``mscale`` / ``mscale_all_dim``."""

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = scaling.get("attention_factor")
    if attention_factor is not None:
        return float(attention_factor)
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return mscale(factor, scaling["mscale"]) / mscale(factor, scaling["mscale_all_dim"])
    return mscale(factor)


def yarn_ramp(head_dim: int, theta: float, scaling: dict[str, Any], max_position_embeddings: int) -> tuple[float, float]:
    """``(low, high)``: the dimensions between which the frequencies ramp from extrapolated to interpolated."""
    original = yarn_original_length(scaling, max_position_embeddings)
    beta_fast = float(scaling.get("beta_fast") or 32)
    beta_slow = float(scaling.get("beta_slow") or 1)

    def correction_dim(num_rotations: float) -> float:
        return (head_dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    return low, high
