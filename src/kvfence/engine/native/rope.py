"""RoPE's cos/sin rows for the native runtime, in the arithmetic of :mod:`kvfence.engine.layers.rotary`
(float32 frequencies and angles, as transformers computes them) for the scaling types it runs:
none, ``default``, ``linear`` and ``llama3``. The length-dependent ones (``dynamic``, ``longrope``)
and ``yarn`` are the torch runtime's (:func:`unsupported_rope`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["SUPPORTED_ROPE_TYPES", "rope_rows", "rope_type", "unsupported_rope"]

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def rope_type(scaling: dict[str, Any] | None) -> str:
    return str((scaling or {}).get("rope_type", "default"))


def unsupported_rope(scaling: dict[str, Any] | None) -> str | None:
    """Why the native runtime cannot rotate for ``scaling``, or ``None`` when it can."""
    kind = rope_type(scaling)
    if kind in SUPPORTED_ROPE_TYPES:
        return None
    return f"rope scaling type {kind!r} (the native runtime rotates {', '.join(SUPPORTED_ROPE_TYPES)})"


def inverse_frequencies(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> np.ndarray:
    """``inv_freq`` [head_dim / 2] float32, as :func:`~kvfence.engine.layers.rotary.rope_inverse_frequencies`."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)
    kind = rope_type(scaling)
    if scaling is None or kind == "default":
        return inv_freq
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return (inv_freq / np.float32(factor)).astype(np.float32)
    if kind == "llama3":
        return _llama3(inv_freq, scaling, factor)
    raise ValueError(unsupported_rope(scaling))


def _llama3(inv_freq: np.ndarray, scaling: dict[str, Any], factor: float) -> np.ndarray:
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_len = float(scaling.get("original_max_position_embeddings", 8192))
    low_freq_wavelen = old_len / low_freq_factor
    high_freq_wavelen = old_len / high_freq_factor
    f32 = np.float32
    # torch divides a scalar by a tensor as the tensor's reciprocal times the scalar: two roundings
    wavelen = ((f32(1) / inv_freq).astype(np.float32) * f32(2 * math.pi)).astype(np.float32)
    scaled = np.where(wavelen > f32(low_freq_wavelen), inv_freq / f32(factor), inv_freq).astype(np.float32)
    smooth = (((f32(1) / wavelen).astype(np.float32) * f32(old_len) - f32(low_freq_factor)) / f32(high_freq_factor - low_freq_factor)).astype(np.float32)
    smoothed = ((f32(1) - smooth) * scaled / f32(factor) + smooth * scaled).astype(np.float32)
    is_medium = ~(wavelen < f32(high_freq_wavelen)) & ~(wavelen > f32(low_freq_wavelen))
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


def rope_rows(positions: np.ndarray, inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin rows [T, head_dim / 2] float32 (contiguous) for ``positions`` [T]: the angle in
    float32 as torch's ``outer``, its cosine and sine rounded from float64."""
    angles = np.outer(positions.astype(np.float32), inv_freq).astype(np.float32)
    wide = angles.astype(np.float64)
    return np.cos(wide).astype(np.float32), np.sin(wide).astype(np.float32)
