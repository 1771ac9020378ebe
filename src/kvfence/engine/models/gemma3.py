"""Gemma 3 (text): interleaved local (sliding-window) and global layers, each kind with its own RoPE.

What differs from the Llama layer: RMSNorm scales by ``1 + weight`` (and rounds after scaling);
q and k get a per-head norm before RoPE; scores are scaled by ``query_pre_attn_scalar ** -0.5``;
the MLP is GELU-tanh gated; each half of a layer has a norm before and after it; embeddings are
multiplied by sqrt(hidden) rounded to the model's dtype; logits are tanh soft-capped where
``final_logit_softcapping`` is set. The runner windows the layers that ``layer_types`` marks
``sliding_attention`` (``ModelConfig.full_attention_layers`` are the others).

The fused CPU decode kernel does none of these, so Gemma 3 runs op by op (its products still run
the kernels' ``linear``).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from kvfence.engine.config import ModelConfig
from kvfence.engine.kernels import DecoderLayerKernel, linear
from kvfence.engine.layers.attention import AttentionMetadata
from kvfence.engine.layers.rotary import RotaryEmbedding
from kvfence.engine.models.llama import (
    Embedding,
    LlamaAttention,
    LlamaForCausalLM,
    LlamaMLP,
    LlamaModel,
    empty_parameter,
)
from kvfence.engine.models.qwen3 import normalise_heads

__all__ = ["Gemma3ForCausalLM", "GemmaRMSNorm"]

Rope = tuple[torch.Tensor, torch.Tensor]


class GemmaRMSNorm(nn.Module):
    """``x / rms(x) * (1 + weight)`` in float32, rounded to ``x``'s dtype at the end (transformers' order)."""

    def __init__(self, dim: int, eps: float, *, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.eps = eps
        self.weight = empty_parameter(dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


class ScaledEmbedding(Embedding):
    def __init__(self, num_embeddings: int, dim: int, *, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(num_embeddings, dim, dtype=dtype, device=device)
        self.scale = float(dim) ** 0.5

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # the scale is rounded to the weights' dtype first, as transformers does
        return F.embedding(ids, self.weight) * torch.tensor(self.scale, dtype=self.weight.dtype)


class Gemma3Attention(LlamaAttention):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(cfg, dtype, device)
        self.q_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype=dtype, device=device)
        self.k_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype=dtype, device=device)

    def before_rope(self, qkv: torch.Tensor) -> torch.Tensor:
        return normalise_heads(qkv, self.num_heads, self.num_kv_heads, self.q_norm, self.k_norm)


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.self_attn = Gemma3Attention(cfg, dtype, device)
        self.mlp = LlamaMLP(cfg, dtype, device)
        def norm() -> GemmaRMSNorm:
            return GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, device=device)

        self.input_layernorm, self.post_attention_layernorm = norm(), norm()
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(), norm()

    def forward(
        self, rope: Rope, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        # x: [T, hidden]
        x = x + self.post_attention_layernorm(self.self_attn(rope, self.input_layernorm(x), k_cache, v_cache, meta))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3Model(LlamaModel):
    """``rotary`` is the global layers' RoPE (``rope_theta``, ``rope_scaling``), ``local_rotary`` the
    windowed layers' (``local_rope_theta``, ``local_rope_scaling``)."""

    layer_cls = Gemma3DecoderLayer
    embedding_cls = ScaledEmbedding
    norm_cls = GemmaRMSNorm

    def __init__(self, cfg: ModelConfig, max_len: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(cfg, max_len, dtype, device)
        self.local_rotary = RotaryEmbedding(
            cfg.rotary_dim, max_len, cfg.local_rope_theta or cfg.rope_theta, cfg.local_rope_scaling,
            cfg.max_position_embeddings, dtype, device,
        )
        windowed = cfg.sliding_window is not None
        self.is_local = [windowed and i not in cfg.full_attention_layers for i in range(cfg.num_hidden_layers)]


class Gemma3ForCausalLM(LlamaForCausalLM):
    """``Gemma3ForCausalLM`` (text only): see the module docstring."""

    model_cls = Gemma3Model

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        rope_seq_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # input_ids, positions: [T] -> hidden: [T, hidden]
        model = cast(Gemma3Model, self.model)
        x = model.embed_tokens(input_ids)
        global_rope = model.rotary.tables(positions, rope_seq_lens)
        local_rope = model.local_rotary.tables(positions) if any(model.is_local) else global_rope
        layers = cast(list[Gemma3DecoderLayer], model.layers)
        metas = meta.per_layer(len(layers))
        for layer, is_local, (k_cache, v_cache), layer_meta in zip(layers, model.is_local, kv_caches, metas, strict=True):
            x = layer(local_rope if is_local else global_rope, x, k_cache, v_cache, layer_meta)
        return model.norm(x)

    def _layer_kernels(self, x: torch.Tensor, rope: Rope) -> list[DecoderLayerKernel] | None:
        return None

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = linear(hidden, weight)
        cap = self.config.final_logit_softcapping
        if cap is not None:  # in the model's dtype, as transformers does
            logits = torch.tanh(logits / cap) * cap
        return logits.float()
