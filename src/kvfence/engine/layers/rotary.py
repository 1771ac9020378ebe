"""Rotary position embedding with the common ``rope_scaling`` variants, as precomputed cos/sin tables.

Which length a token is rotated for, where that matters, is :mod:`.rope_lengths` (no torch)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from kvfence.engine.kernels import try_rope_
from kvfence.engine.layers.rope_lengths import rope_length_threshold
from kvfence.engine.layers.yarn import yarn_attention_factor, yarn_factor, yarn_ramp

__all__ = ["RotaryEmbedding", "rope_inverse_frequencies"]


def rope_inverse_frequencies(
    head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position_embeddings: int
) -> tuple[torch.Tensor, float]:
    """Return ``(inv_freq [head_dim/2], attention_factor)`` for the given ``rope_scaling``, for sequences
    up to :func:`~.rope_lengths.rope_length_threshold` (past it, :meth:`RotaryEmbedding.tables` rotates
    by length).
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = (scaling or {}).get("rope_type", "default")
    if scaling is None or rope_type in ("default", "dynamic"):  # dynamic: unscaled up to max_position_embeddings
        return inv_freq, 1.0
    if rope_type == "longrope":
        return _longrope(head_dim, theta, scaling, max_position_embeddings, "short_factor")
    if rope_type == "yarn":
        return _yarn(head_dim, theta, scaling, yarn_factor(scaling, max_position_embeddings), max_position_embeddings)
    factor = float(scaling.get("factor", 1.0))
    if rope_type == "linear":
        return inv_freq / factor, 1.0
    if rope_type == "llama3":
        return _llama3(inv_freq, scaling, factor), 1.0
    raise ValueError(f"unsupported rope type {rope_type!r}")  # config.py rejects these earlier


def _dynamic_ntk(head_dim: int, theta: float, factor: float, max_position_embeddings: int, seq_len: int) -> torch.Tensor:
    """Dynamic NTK frequencies for a sequence of ``seq_len`` tokens, in transformers' float32 arithmetic
    (its ``seq_len`` is a tensor there, so the new base is a float32 scalar, not a Python float)."""
    length = torch.tensor(max(seq_len, max_position_embeddings), dtype=torch.int64)
    base = theta * ((factor * length / max_position_embeddings) - (factor - 1)) ** (head_dim / (head_dim - 2))
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def _longrope(
    head_dim: int, theta: float, scaling: dict[str, Any], max_position_embeddings: int, which: str
) -> tuple[torch.Tensor, float]:
    """LongRoPE's frequencies from its ``short_factor`` or ``long_factor`` list, and its attention factor
    (the same for both)."""
    original = int(scaling["original_max_position_embeddings"])
    factor = scaling.get("factor")
    factor = max_position_embeddings / original if factor is None else float(factor)
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = torch.tensor([float(f) for f in scaling[which]], dtype=torch.float32)
    if ext.numel() != head_dim // 2:
        raise ValueError(f"longrope {which} has {ext.numel()} entries, head_dim {head_dim} needs {head_dim // 2}")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (ext * theta**exponents), float(attention_factor)


def _llama3(inv_freq: torch.Tensor, scaling: dict[str, Any], factor: float) -> torch.Tensor:
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_len = float(scaling.get("original_max_position_embeddings", 8192))
    low_freq_wavelen = old_len / low_freq_factor
    high_freq_wavelen = old_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn(
    head_dim: int, theta: float, scaling: dict[str, Any], factor: float, max_position_embeddings: int
) -> tuple[torch.Tensor, float]:
    low, high = yarn_ramp(head_dim, theta, scaling, max_position_embeddings)
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extrapolation_weight = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv_freq, yarn_attention_factor(scaling, factor)


class RotaryEmbedding(nn.Module):
    """Applies RoPE to the query and key heads of a token batch from tables built once at start-up."""

    def __init__(
        self,
        head_dim: int,
        max_len: int,
        theta: float,
        scaling: dict[str, Any] | None,
        max_position_embeddings: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        inv_freq, attention_factor = rope_inverse_frequencies(head_dim, theta, scaling, max_position_embeddings)
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        cos, sin = _table(torch.arange(max_len, dtype=torch.float32), inv_freq, attention_factor)
        self.register_buffer("cos", cos.to(dtype).to(device), persistent=False)
        self.register_buffer("sin", sin.to(dtype).to(device), persistent=False)
        # Sequences longer than this are rotated by length (dynamic NTK, longrope); None: never.
        self.length_threshold = rope_length_threshold(scaling, max_position_embeddings)
        self._head_dim, self._theta, self._max_positions = head_dim, theta, max_position_embeddings
        self._dynamic_factor = float((scaling or {}).get("factor") or 1.0)
        self._long: tuple[torch.Tensor, torch.Tensor] | None = None
        if scaling is not None and scaling.get("rope_type") == "longrope":
            long_freq, _ = _longrope(head_dim, theta, scaling, max_position_embeddings, "long_factor")
            long_cos, long_sin = _table(torch.arange(max_len, dtype=torch.float32), long_freq, attention_factor)
            self._long = (long_cos.to(dtype).to(device), long_sin.to(dtype).to(device))

    def tables(
        self, positions: torch.Tensor, seq_lens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin rows for ``positions`` [T], shaped [T, 1, head_dim/2]; gathered once per step.

        ``seq_lens`` [T] (see :func:`~.rope_lengths.rope_lengths`) is needed past :attr:`length_threshold` only."""
        cos, sin = self.cos[positions], self.sin[positions]
        if seq_lens is not None and self.length_threshold is not None:
            longer = seq_lens > self.length_threshold
            if bool(longer.any()):
                self._rotate_by_length(cos, sin, positions, seq_lens, longer)
        return cos.unsqueeze(1), sin.unsqueeze(1)

    def _rotate_by_length(
        self, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor,
        longer: torch.Tensor,
    ) -> None:
        """Overwrite the rows of tokens in sequences past the threshold (``longer``) with their tables."""
        if self._long is not None:  # longrope: one long-factor table for every length past it
            rows = positions[longer]
            cos[longer], sin[longer] = self._long[0][rows], self._long[1][rows]
            return
        for length in seq_lens[longer].unique().tolist():  # dynamic NTK: frequencies per length
            chosen = seq_lens == length
            inv_freq = _dynamic_ntk(self._head_dim, self._theta, self._dynamic_factor, self._max_positions, length)
            c, s = _table(positions[chosen].float().cpu(), inv_freq, 1.0)
            cos[chosen], sin[chosen] = c.to(cos.dtype).to(cos.device), s.to(sin.dtype).to(sin.device)

    @staticmethod
    def rotate_(x: torch.Tensor, num_heads: int, cos: torch.Tensor, sin: torch.Tensor) -> None:
        """Rotate heads ``[0, num_heads)`` of ``x`` [T, heads, head_dim] in place; with tables narrower
        than ``head_dim / 2`` (partial rotary), only the first ``2 * cos.shape[-1]`` dimensions of each."""
        rotary_dim = 2 * cos.shape[-1]
        if rotary_dim != x.shape[-1]:
            heads = x[:, :num_heads, :rotary_dim]
            heads.copy_(RotaryEmbedding.rotate(heads, cos, sin))
        elif not try_rope_(x, num_heads, cos, sin):
            heads = x[:, :num_heads]
            heads.copy_(RotaryEmbedding.rotate(heads, cos, sin))

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [T, heads, head_dim] (query and key heads together); rotate-half form, as transformers
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _table(positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = torch.outer(positions, inv_freq)  # [positions, head_dim/2], float32 as transformers does
    return freqs.cos() * attention_factor, freqs.sin() * attention_factor
