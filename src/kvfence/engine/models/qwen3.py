"""Qwen3: the Llama decoder with a per-head RMSNorm on q and k before RoPE (and no q/k/v bias).

The fused CPU decode kernel has no q/k-norm step between its projection and its RoPE, so Qwen3
layers run op by op (the products still run the kernels' ``linear``); ``docs/models.md`` has the cost.
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


class Qwen3DecoderLayer(LlamaDecoderLayer):
    attention_cls = Qwen3Attention
    fusable = False  # q/k norms sit between the kernel's projection and its RoPE


class Qwen3Model(LlamaModel):
    layer_cls = Qwen3DecoderLayer


class Qwen3ForCausalLM(LlamaForCausalLM):
    """``Qwen3ForCausalLM``: see the module docstring."""

    model_cls = Qwen3Model
