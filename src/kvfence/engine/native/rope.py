"""RoPE's cos/sin rows for the native runtime, in the arithmetic of :mod:`kvfence.engine.layers.rotary`
(float32 frequencies and angles, as transformers computes them) for the scaling types it runs:
none, ``default``, ``linear``, ``llama3``, ``yarn`` and ``dynamic`` NTK (frequencies per sequence
length past ``max_position_embeddings``, :mod:`~kvfence.engine.layers.rope_lengths`). ``longrope`` is
the torch runtime's (:func:`unsupported_rope`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kvfence.engine.layers.rope_lengths import rope_length_threshold
from kvfence.engine.layers.yarn import yarn_attention_factor, yarn_factor, yarn_ramp

__all__ = ["SUPPORTED_ROPE_TYPES", "Rope", "inverse_frequencies", "rope_type", "unsupported_rope"]

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")

f32 = np.float32


def rope_type(scaling: dict[str, Any] | None) -> str:
    return str((scaling or {}).get("rope_type", "default"))


def unsupported_rope(scaling: dict[str, Any] | None) -> str | None:
    """Why the native runtime cannot rotate for ``scaling``, or ``None`` when it can."""
    kind = rope_type(scaling)
    if kind in SUPPORTED_ROPE_TYPES:
        return None
    return f"rope scaling type {kind!r} (the native runtime rotates {', '.join(SUPPORTED_ROPE_TYPES)})"


class Rope:
    """A model's RoPE: :meth:`rows` gives the cos and sin rows of a step's positions."""

    def __init__(self, head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position_embeddings: int):
        self.inv_freq, self.attention_factor = inverse_frequencies(head_dim, theta, scaling, max_position_embeddings)
        # sequences longer than this are rotated by length (dynamic NTK); None: never
        self.length_threshold = rope_length_threshold(scaling, max_position_embeddings)
        self._head_dim, self._theta, self._max_positions = head_dim, theta, max_position_embeddings
        self._dynamic_factor = float((scaling or {}).get("factor") or 1.0)

    def rows(self, positions: np.ndarray, seq_lens: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin rows [T, head_dim / 2] float32 (contiguous) for ``positions`` [T]; ``seq_lens`` [T]
        (:func:`~kvfence.engine.layers.rope_lengths.rope_lengths`) is needed past :attr:`length_threshold` only."""
        cos, sin = _rows(positions, self.inv_freq, self.attention_factor)
        if seq_lens is None or self.length_threshold is None:
            return cos, sin
        longer = seq_lens > self.length_threshold
        for length in np.unique(seq_lens[longer]).tolist():  # dynamic NTK: frequencies per length
            chosen = seq_lens == length
            inv_freq = _dynamic_ntk(self._head_dim, self._theta, self._dynamic_factor, self._max_positions, length)
            cos[chosen], sin[chosen] = _rows(positions[chosen], inv_freq, 1.0)
        return cos, sin


def inverse_frequencies(
    head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position_embeddings: int
) -> tuple[np.ndarray, float]:
    """``(inv_freq [head_dim / 2] float32, attention_factor)``, as
    :func:`~kvfence.engine.layers.rotary.rope_inverse_frequencies`."""
    inv_freq = (f32(1.0) / (f32(theta) ** _exponents(head_dim))).astype(np.float32)
    kind = rope_type(scaling)
    if scaling is None or kind in ("default", "dynamic"):  # dynamic: unscaled up to max_position_embeddings
        return inv_freq, 1.0
    if kind == "yarn":
        return _yarn(head_dim, theta, scaling, max_position_embeddings)
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return (inv_freq / f32(factor)).astype(np.float32), 1.0
    if kind == "llama3":
        return _llama3(inv_freq, scaling, factor), 1.0
    raise ValueError(unsupported_rope(scaling))


def _exponents(head_dim: int) -> np.ndarray:
    return np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / f32(head_dim)


def _llama3(inv_freq: np.ndarray, scaling: dict[str, Any], factor: float) -> np.ndarray:
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_len = float(scaling.get("original_max_position_embeddings", 8192))
    low_freq_wavelen = old_len / low_freq_factor
    high_freq_wavelen = old_len / high_freq_factor
    # torch divides a scalar by a tensor as the tensor's reciprocal times the scalar: two roundings
    wavelen = ((f32(1) / inv_freq).astype(np.float32) * f32(2 * math.pi)).astype(np.float32)
    scaled = np.where(wavelen > f32(low_freq_wavelen), inv_freq / f32(factor), inv_freq).astype(np.float32)
    smooth = (((f32(1) / wavelen).astype(np.float32) * f32(old_len) - f32(low_freq_factor)) / f32(high_freq_factor - low_freq_factor)).astype(np.float32)
    smoothed = ((f32(1) - smooth) * scaled / f32(factor) + smooth * scaled).astype(np.float32)
    is_medium = ~(wavelen < f32(high_freq_wavelen)) & ~(wavelen > f32(low_freq_wavelen))
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


def _yarn(head_dim: int, theta: float, scaling: dict[str, Any], max_position_embeddings: int) -> tuple[np.ndarray, float]:
    factor = yarn_factor(scaling, max_position_embeddings)
    low, high = yarn_ramp(head_dim, theta, scaling, max_position_embeddings)
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float32) - f32(low)) / f32(high - low), 0, 1).astype(np.float32)
    pos_freqs = (f32(theta) ** _exponents(head_dim)).astype(np.float32)
    extrapolation = (f32(1) / pos_freqs).astype(np.float32)
    interpolation = (f32(1) / (f32(factor) * pos_freqs)).astype(np.float32)
    extrapolation_weight = f32(1) - ramp
    inv_freq = interpolation * (f32(1) - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv_freq.astype(np.float32), yarn_attention_factor(scaling, factor)


def _dynamic_ntk(head_dim: int, theta: float, factor: float, max_position_embeddings: int, seq_len: int) -> np.ndarray:
    """Dynamic NTK frequencies for a sequence of ``seq_len`` tokens, in float32 as transformers computes them."""
    length = f32(max(seq_len, max_position_embeddings))
    base = f32(theta) * ((f32(factor) * length / f32(max_position_embeddings)) - f32(factor - 1)) ** f32(
        head_dim / (head_dim - 2))
    return (f32(1) / (base ** _exponents(head_dim))).astype(np.float32)


def _rows(positions: np.ndarray, inv_freq: np.ndarray, attention_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """The angle in float32 as torch's ``outer``, its cosine and sine rounded from float64, times
    ``attention_factor`` in float32."""
    angles = np.outer(positions.astype(np.float32), inv_freq).astype(np.float32)
    wide = angles.astype(np.float64)
    cos, sin = np.cos(wide).astype(np.float32), np.sin(wide).astype(np.float32)
    if attention_factor != 1.0:
        cos, sin = cos * f32(attention_factor), sin * f32(attention_factor)
    return cos, sin
