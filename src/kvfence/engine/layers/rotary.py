"""Rotary position embedding with the common ``rope_scaling`` variants, as precomputed cos/sin tables."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from kvfence.engine.kernels import try_rope_

__all__ = ["RotaryEmbedding", "rope_inverse_frequencies"]


def rope_inverse_frequencies(
    head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position_embeddings: int, max_len: int
) -> tuple[torch.Tensor, float]:
    """Return ``(inv_freq [head_dim/2], attention_factor)`` for the given ``rope_scaling``.

    ``dynamic`` NTK scaling is fixed at ``max_len``: it only changes the frequencies when the
    engine's context is longer than ``max_position_embeddings``. transformers rescales per forward
    call from the longest sequence so far, so up to ``max_position_embeddings`` (the longest context
    the engine accepts for a dynamic model) both use the unscaled frequencies and agree exactly.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = (scaling or {}).get("rope_type", "default")
    if scaling is None or rope_type == "default":
        return inv_freq, 1.0
    if rope_type == "longrope":
        return _longrope_short(head_dim, theta, scaling, max_position_embeddings)
    if scaling.get("factor") is None and rope_type == "yarn":  # as transformers: the stretch the config states
        original = int(scaling.get("original_max_position_embeddings") or max_position_embeddings)
        scaling = {**scaling, "factor": max_position_embeddings / original}
    factor = float(scaling.get("factor", 1.0))
    if rope_type == "linear":
        return inv_freq / factor, 1.0
    if rope_type == "dynamic":
        # transformers scales past config.max_position_embeddings (not the dict's original length)
        original = max_position_embeddings
        if max_len <= original:
            return inv_freq, 1.0
        base = theta * ((factor * max_len / original) - (factor - 1)) ** (head_dim / (head_dim - 2))
        return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)), 1.0
    if rope_type == "llama3":
        return _llama3(inv_freq, scaling, factor), 1.0
    if rope_type == "yarn":
        return _yarn(head_dim, theta, scaling, factor, max_position_embeddings)
    raise ValueError(f"unsupported rope type {rope_type!r}")  # config.py rejects these earlier


def _longrope_short(
    head_dim: int, theta: float, scaling: dict[str, Any], max_position_embeddings: int
) -> tuple[torch.Tensor, float]:
    """LongRoPE's ``short_factor`` frequencies: what transformers uses while a sequence stays within
    ``original_max_position_embeddings``, the only lengths the engine serves such a model at."""
    original = int(scaling["original_max_position_embeddings"])
    factor = scaling.get("factor")
    factor = max_position_embeddings / original if factor is None else float(factor)
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    short = torch.tensor([float(f) for f in scaling["short_factor"]], dtype=torch.float32)
    if short.numel() != head_dim // 2:
        raise ValueError(f"longrope short_factor has {short.numel()} entries, head_dim {head_dim} needs {head_dim // 2}")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (short * theta**exponents), float(attention_factor)


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
    original = int(scaling.get("original_max_position_embeddings") or max_position_embeddings)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        if scaling.get("mscale") and scaling.get("mscale_all_dim"):
            attention_factor = mscale(factor, scaling["mscale"]) / mscale(factor, scaling["mscale_all_dim"])
        else:
            attention_factor = mscale(factor)
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
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extrapolation_weight = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv_freq, float(attention_factor)


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
        inv_freq, attention_factor = rope_inverse_frequencies(
            head_dim, theta, scaling, max_position_embeddings, max_len
        )
        positions = torch.arange(max_len, dtype=torch.float32)
        freqs = torch.outer(positions, inv_freq)  # [max_len, head_dim/2], float32 as transformers does
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        self.register_buffer("cos", (freqs.cos() * attention_factor).to(dtype).to(device), persistent=False)
        self.register_buffer("sin", (freqs.sin() * attention_factor).to(dtype).to(device), persistent=False)

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin rows for ``positions`` [T], shaped [T, 1, head_dim/2]; gathered once per step."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)

    @staticmethod
    def rotate_(x: torch.Tensor, num_heads: int, cos: torch.Tensor, sin: torch.Tensor) -> None:
        """Rotate heads ``[0, num_heads)`` of ``x`` [T, heads, head_dim] in place."""
        if not try_rope_(x, num_heads, cos, sin):
            heads = x[:, :num_heads]
            heads.copy_(RotaryEmbedding.rotate(heads, cos, sin))

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [T, heads, head_dim] (query and key heads together); rotate-half form, as transformers
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
