"""Llama-family decoder (Llama, Qwen2, Mistral) over the paged KV pool, and the shared decoder the
other families (:mod:`.qwen3`, :mod:`.phi3`, :mod:`.gemma3`) build on by replacing parts: the
classes a layer is made of are class attributes (``attention_cls``, ``mlp_cls``, ``layer_cls``,
``model_cls``), and :meth:`LlamaAttention.before_rope` is where a family touches q and k.

Checkpoint tensors keep their Hugging Face names; q/k/v and gate/up projections are stored fused
(``qkv_proj``, ``gate_up_proj``) so a decode step runs two matmuls where transformers runs five.
Parameters are allocated uninitialised: every one of them is overwritten by the loader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from kvfence.engine.config import ModelConfig
from kvfence.engine.kernels import DecoderLayerKernel, linear, rms_norm, silu_mul
from kvfence.engine.kernels.decode_step import DecodeStepKernel
from kvfence.engine.kernels.half_weights import compute_and_weight_dtypes
from kvfence.engine.kernels.huge_pages import place_on_huge_pages
from kvfence.engine.kernels.ops import kernel_runs_products
from kvfence.engine.kernels.packed_weights import (
    PACKED_MAX_ROWS,
    PACKED_MIN_ROWS,
    PackedWeight,
    packed_weights_enabled,
)
from kvfence.engine.layers.attention import AttentionMetadata, paged_attention
from kvfence.engine.layers.rotary import RotaryEmbedding

__all__ = [
    "Embedding",
    "FusedLinear",
    "LlamaAttention",
    "LlamaDecoderLayer",
    "LlamaForCausalLM",
    "LlamaMLP",
    "LlamaModel",
    "RMSNorm",
    "empty_parameter",
    "gated_activation",
]

# the fused decode kernel computes silu(gate) * up; other activations run op by op
_SILU = ("silu", "swish")


def empty_parameter(*shape: int, dtype: torch.dtype, device: torch.device) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device), requires_grad=False)


class FusedLinear(nn.Module):
    """A linear layer whose output rows may stack several checkpoint tensors (``shards``)."""

    def __init__(
        self,
        in_features: int,
        shards: dict[str, int],
        *,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.shard_rows: dict[str, tuple[int, int]] = {}
        offset = 0
        for name, rows in shards.items():
            self.shard_rows[name] = (offset, rows)
            offset += rows
        self.weight = empty_parameter(offset, in_features, dtype=dtype, device=device)
        self.bias = empty_parameter(offset, dtype=dtype, device=device) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, dim: int, *, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.weight = empty_parameter(num_embeddings, dim, dtype=dtype, device=device)
        self.compute_dtype = dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # half-precision weights under a float32 model (kernels.half_weights): rows widened on lookup
        return F.embedding(ids, self.weight).to(self.compute_dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, *, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.eps = eps
        self.weight = empty_parameter(dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return rms_norm(x, self.weight, self.eps)
        # Half precision: normalise in float32, round, then scale, in transformers' order.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def gated_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """``act(gate) * up`` for a ``[T, 2 * I]`` tensor laid out ``[gate | up]``, for ``hidden_act`` ``name``."""
    if name in _SILU:
        return silu_mul
    approximate = "tanh" if name == "gelu_pytorch_tanh" else "none"

    def gelu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.gelu(gate, approximate=approximate) * up

    return gelu_mul


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scale = cfg.attention_scale
        q_rows, kv_rows = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = FusedLinear(
            cfg.hidden_size, {"q": q_rows, "k": kv_rows, "v": kv_rows}, bias=cfg.attention_bias, dtype=dtype, device=device
        )
        self.o_proj = FusedLinear(q_rows, {"": cfg.hidden_size}, bias=cfg.attention_bias and cfg.architecture != "Qwen2ForCausalLM", dtype=dtype, device=device)

    def forward(
        self,
        rope: tuple[torch.Tensor, torch.Tensor],
        x: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        # x: [T, hidden]
        num_tokens = x.shape[0]
        qkv = self.before_rope(self.qkv_proj(x).view(num_tokens, self.num_heads + 2 * self.num_kv_heads, self.head_dim))
        RotaryEmbedding.rotate_(qkv, self.num_heads + self.num_kv_heads, *rope)  # q and k heads
        return self.o_proj(self.attend(qkv, k_cache, v_cache, meta))

    def before_rope(self, qkv: torch.Tensor) -> torch.Tensor:
        """What a family does to the projected ``qkv`` [T, H + 2 KV, D] before RoPE (Llama: nothing)."""
        return qkv

    def head_norm_weights(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The ``(q, k)`` weights of the per-head RMSNorms :meth:`before_rope` applies with the
        layer's ``rms_norm_eps``, for the fused kernel to apply them (Llama: none)."""
        return None

    def attend(
        self, qkv: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """Attention over the pool for rotated ``qkv`` [T, H + 2 KV, D]; returns [T, H * D] (before o_proj)."""
        q = qkv[:, : self.num_heads]  # three slices: a third of split()'s dispatch time
        k = qkv[:, self.num_heads : self.num_heads + self.num_kv_heads]
        v = qkv[:, self.num_heads + self.num_kv_heads :]
        out = paged_attention(q, k, v, k_cache, v_cache, meta, self.scale)  # [T, H, D]
        return out.reshape(qkv.shape[0], self.num_heads * self.head_dim)


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        inter = cfg.intermediate_size
        self.intermediate_size = inter
        self.gate_up_proj = FusedLinear(cfg.hidden_size, {"gate": inter, "up": inter}, bias=cfg.mlp_bias, dtype=dtype, device=device)
        self.down_proj = FusedLinear(inter, {"": cfg.hidden_size}, bias=cfg.mlp_bias, dtype=dtype, device=device)
        self.act_mul = gated_activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_mul(self.gate_up_proj(x)))  # gate_up rows: [gate | up]


class LlamaDecoderLayer(nn.Module):
    attention_cls: type[LlamaAttention] = LlamaAttention
    mlp_cls: type[LlamaMLP] = LlamaMLP
    # whether the fused CPU kernel computes this layer (it does RMSNorm, qkv, full-head RoPE; silu MLP)
    fusable = True

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.self_attn = self.attention_cls(cfg, dtype, device)
        self.mlp = self.mlp_cls(cfg, dtype, device)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, device=device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, device=device)
        self._kernel: DecoderLayerKernel | None = None
        self._fusable = self.fusable and cfg.hidden_act in _SILU and cfg.rotary_dim == cfg.head_dim

    def fused_kernel(self) -> DecoderLayerKernel | None:
        """The layer's fused CPU fp32 kernel (built at first use, rebuilt when the weights or the
        kernel library change), or ``None`` where it does not apply (other device or dtype, kernels off).
        Code that swaps a weight tensor for another (not a copy into it) calls :meth:`drop_fused_kernel`."""
        if not self._fusable:
            return None
        if self._kernel is None or not self._kernel.is_current():
            attn = self.self_attn
            self._kernel = DecoderLayerKernel.build(
                input_norm=self.input_layernorm.weight,
                post_norm=self.post_attention_layernorm.weight,
                eps=self.input_layernorm.eps,
                qkv=(attn.qkv_proj.weight, attn.qkv_proj.bias),
                o=(attn.o_proj.weight, attn.o_proj.bias),
                gate_up=(self.mlp.gate_up_proj.weight, self.mlp.gate_up_proj.bias),
                down=(self.mlp.down_proj.weight, self.mlp.down_proj.bias),
                num_heads=attn.num_heads,
                num_kv_heads=attn.num_kv_heads,
                head_dim=attn.head_dim,
                head_norms=attn.head_norm_weights(),
            )
        return self._kernel

    def drop_fused_kernel(self) -> None:
        """Forget the fused kernel's argument block; the next step builds it from the current weights."""
        self._kernel = None

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> LlamaDecoderLayer:
        # .to(), .float(), .cpu() ... may give the weights new storage: describe them afresh
        self._kernel = None
        return super()._apply(fn, recurse)

    def forward(
        self,
        rope: tuple[torch.Tensor, torch.Tensor],
        x: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        kernel = self.fused_kernel() if x.is_cpu and x.dtype == torch.float32 else None
        if kernel is not None and kernel.takes(x, *rope):
            return self.forward_fused(kernel, rope, x, k_cache, v_cache, meta)
        return self.forward_per_op(rope, x, k_cache, v_cache, meta)

    def forward_per_op(
        self,
        rope: tuple[torch.Tensor, torch.Tensor],
        x: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """:meth:`forward` op by op (torch, or the per-op kernels inside ``linear`` and the norms)."""
        x = x + self.self_attn(rope, self.input_layernorm(x), k_cache, v_cache, meta)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_fused(
        self,
        kernel: DecoderLayerKernel,
        rope: tuple[torch.Tensor, torch.Tensor],
        x: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """:meth:`forward` as two kernel calls around attention (a decode-sized CPU fp32 batch that
        ``kernel.takes``): the same arithmetic as the per-op path, not ~30 torch ops."""
        attn = self.self_attn.attend(kernel.pre(x, *rope), k_cache, v_cache, meta)
        return kernel.post(attn, x)


class LlamaModel(nn.Module):
    layer_cls: type[nn.Module] = LlamaDecoderLayer
    embedding_cls: type[Embedding] = Embedding
    norm_cls: type[nn.Module] = RMSNorm

    def __init__(self, cfg: ModelConfig, max_len: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.embed_tokens = self.embedding_cls(cfg.vocab_size, cfg.hidden_size, dtype=dtype, device=device)
        self.rotary = RotaryEmbedding(
            cfg.rotary_dim, max_len, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings, dtype, device
        )
        self.layers = nn.ModuleList(self.layer_cls(cfg, dtype, device) for _ in range(cfg.num_hidden_layers))
        self.norm = self.norm_cls(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, device=device)


class LlamaForCausalLM(nn.Module):
    """The decoder plus LM head. ``forward`` returns hidden states; ``compute_logits`` the float32 logits."""

    model_cls: type[LlamaModel] = LlamaModel

    def __init__(self, cfg: ModelConfig, max_len: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.config = cfg
        compute_dtype, weight_dtype = compute_and_weight_dtypes(dtype, device)
        self.model = self.model_cls(cfg, max_len, compute_dtype, device)
        self.lm_head: FusedLinear | None = None
        if not cfg.tie_word_embeddings:
            self.lm_head = FusedLinear(cfg.hidden_size, {"": cfg.vocab_size}, bias=False, dtype=compute_dtype, device=device)
        if weight_dtype != compute_dtype:
            self._store_weights_as(weight_dtype)
        if device.type == "cpu":
            # every step streams all the weights: one buffer on 2 MiB pages (see kernels.huge_pages)
            place_on_huge_pages(self)
        self._lm_head_packed: PackedWeight | None = None
        self._step: tuple[DecodeStepKernel | None, object] = (None, None)  # and what it was built for

    def _store_weights_as(self, dtype: torch.dtype) -> None:
        """Store the matrix weights (products and the plain token embedding) as ``dtype``, before
        anything is loaded or touched: the float32 buffers they replace were never written."""
        for module in self.modules():
            if isinstance(module, FusedLinear) or type(module) is Embedding:
                weight = module.weight
                module.weight = empty_parameter(*weight.shape, dtype=dtype, device=weight.device)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        rope_seq_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # input_ids, positions: [T] -> hidden: [T, hidden]; rope_seq_lens: [T], for length-dependent RoPE only
        x = self.model.embed_tokens(input_ids)
        rope = self.model.rotary.tables(positions, rope_seq_lens)
        kernels = self._layer_kernels(x, rope)
        layers = cast(list[LlamaDecoderLayer], self.model.layers)
        metas = meta.per_layer(len(layers))  # full-attention layers of a windowed model see more
        if kernels is not None:  # decided once per step, not per layer
            step = self._decode_step(kernels, kv_caches)
            if step is not None and step.takes(x, meta):  # every layer, attention included, in one call
                return self.model.norm(step.run(x, *rope, meta))
            for fused_layer, kernel, (k_cache, v_cache), layer_meta in zip(layers, kernels, kv_caches, metas, strict=True):
                x = fused_layer.forward_fused(kernel, rope, x, k_cache, v_cache, layer_meta)
        else:
            for layer, (k_cache, v_cache), layer_meta in zip(layers, kv_caches, metas, strict=True):
                x = layer.forward_per_op(rope, x, k_cache, v_cache, layer_meta)
        return self.model.norm(x)

    def _layer_kernels(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
    ) -> list[DecoderLayerKernel] | None:
        """Every layer's fused kernel when this batch runs them, else ``None`` (the per-op path)."""
        if not x.is_cpu or x.dtype != torch.float32:
            return None
        kernels = []
        for layer in cast(list[LlamaDecoderLayer], self.model.layers):
            kernel = layer.fused_kernel()
            if kernel is None:
                return None
            kernels.append(kernel)
        return kernels if kernels and kernels[0].takes(x, *rope) else None

    def _decode_step(
        self, kernels: list[DecoderLayerKernel], kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> DecodeStepKernel | None:
        """The one-call decode step over these layer kernels and pools (built when they change),
        or ``None`` where the step kernel does not read these pools (the per-layer calls run)."""
        step, tried = self._step
        if step is not None and step.is_current(kernels, kv_caches):
            return step
        key = (tuple(kernels), tuple((k.data_ptr(), v.data_ptr()) for k, v in kv_caches))
        if step is None and tried == key:
            return None
        layers = cast(list[LlamaDecoderLayer], self.model.layers)
        scales = [attn.scale or attn.head_dim**-0.5 for attn in (layer.self_attn for layer in layers)]
        step = DecodeStepKernel.build(kernels, kv_caches, scales)
        self._step = (step, key)
        return step

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return linear(hidden, weight, packed=self._packed_lm_head(hidden, weight)).float()

    def _packed_lm_head(self, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor | None:
        """The LM head's panel-major copy for the decode kernels' tiled products (made at the first
        such product, remade when the weight changed), or ``None`` when they do not run this one."""
        if not (
            hidden.dim() == 2
            and PACKED_MIN_ROWS <= hidden.shape[0] <= PACKED_MAX_ROWS
            and kernel_runs_products(hidden.shape[0])
            and weight.is_cpu
            and weight.dtype == torch.float32
            and weight.dim() == 2
            and weight.is_contiguous()
            and not weight.requires_grad
            and packed_weights_enabled()
        ):
            return None
        if self._lm_head_packed is None or not self._lm_head_packed.is_current(weight):
            self._lm_head_packed = PackedWeight(weight)
        return self._lm_head_packed.panels
