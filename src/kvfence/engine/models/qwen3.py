"""Qwen3: the Llama decoder with a per-head RMSNorm on q and k before RoPE (and no q/k/v bias).

The fused CPU decode kernel applies the two norms between its projection and its RoPE (the same
``rms_norm`` kernel, row by row), so Qwen3 decodes through it as Llama does.
"""

from __future__ import annotations

import torch

from kvfence.engine.config import ModelConfig
from kvfence.engine.models.llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaModel,
    RMSNorm,
)

__all__ = ["Qwen3ForCausalLM", "normalise_heads"]


def normalise_heads(qkv: torch.Tensor, num_heads: int, num_kv_heads: int, q_norm: torch.nn.Module,
                    k_norm: torch.nn.Module) -> torch.Tensor:
    """``qkv`` [T, H + 2 KV, D] with its query heads through ``q_norm`` and its key heads through
    ``k_norm`` (each over ``D``, per head); the value heads untouched."""
    tokens, _, head_dim = qkv.shape
    q = q_norm(qkv[:, :num_heads].reshape(-1, head_dim)).view(tokens, num_heads, head_dim)
    k = k_norm(qkv[:, num_heads : num_heads + num_kv_heads].reshape(-1, head_dim)).view(tokens, num_kv_heads, head_dim)
    return torch.cat((q, k, qkv[:, num_heads + num_kv_heads :]), dim=1)


class Qwen3Attention(LlamaAttention):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(cfg, dtype, device)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype=dtype, device=device)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype=dtype, device=device)

    def before_rope(self, qkv: torch.Tensor) -> torch.Tensor:
        return normalise_heads(qkv, self.num_heads, self.num_kv_heads, self.q_norm, self.k_norm)

    def head_norm_weights(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.q_norm.weight, self.k_norm.weight


class Qwen3DecoderLayer(LlamaDecoderLayer):
    attention_cls = Qwen3Attention


class Qwen3Model(LlamaModel):
    layer_cls = Qwen3DecoderLayer


class Qwen3ForCausalLM(LlamaForCausalLM):
    """``Qwen3ForCausalLM``: see the module docstring."""

    model_cls = Qwen3Model
