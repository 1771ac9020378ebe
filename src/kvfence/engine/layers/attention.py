"""Attention over the paged KV pool: one mixed batch of decode tokens and prefill chunks.

Token layout of a step (built by the model runner): all decode tokens first (one per sequence),
then each prefill chunk as a contiguous run. New K/V are written into the pool through
``slot_mapping``; attention then reads K/V only through the sequence's own block table (I1).
Padding in the decode gather points at the pool's reserved null slot, which is always zero, so a
sequence never reads even a masked-out byte of a page that is not in its block table.

Decode on CPU in float32 runs a kernel that reads each visible K/V row straight from the pool
(:mod:`kvfence.engine.kernels.paged_attention`): torch's gather copies every visible row of every
layer before attending, and that copy, not arithmetic, is what a large decode batch over long
contexts spends its time on. Elsewhere (CUDA, half precision, no compiler) torch runs.

The pool may hold K/V in a narrower dtype than the model computes in (``kv_cache_dtype``, e.g.
bfloat16 or float16 K/V for a float32 model): K/V are rounded to the pool dtype when written, and
every attention, prefill from position 0 included, reads the rounded values, widened back to the
compute dtype, so a token's attention does not depend on whether its context came from this
step or from the pool (recompute after preemption gives the same result).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kvfence.engine.kernels.paged_attention import paged_decode_f32, write_kv

__all__ = ["AttentionMetadata", "PrefillChunk", "paged_attention"]


@dataclass
class PrefillChunk:
    """One sequence's prefill tokens ``[token_start, token_end)`` in the step's token batch.

    ``context_slots`` lists the pool slots of every position up to the chunk's end when the chunk
    sits on top of earlier KV (cached prefix or earlier chunk); ``None`` means the chunk starts at
    position 0 and attends to its own fresh K/V only. ``mask`` is ``None`` for plain causal attention.
    """

    token_start: int
    token_end: int
    context_slots: torch.Tensor | None
    mask: torch.Tensor | None


@dataclass
class AttentionMetadata:
    """Per-step tensors shared by every layer."""

    slot_mapping: torch.Tensor  # [T] pool slot written by each token
    num_decode_tokens: int
    decode_slots: torch.Tensor | None = None  # [B, L] slots read by each decoding sequence (padded)
    decode_mask: torch.Tensor | None = None  # [B, 1, 1, L] bool; None when nothing is padded
    prefills: list[PrefillChunk] = field(default_factory=list)
    # layer index -> the metadata that layer uses instead (full-attention layers of a windowed model)
    layer_overrides: dict[int, AttentionMetadata] = field(default_factory=dict)
    _decode_bounds: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    def per_layer(self, num_layers: int) -> list[AttentionMetadata]:
        """The metadata of each of ``num_layers`` layers: this one, except where overridden."""
        if not self.layer_overrides:
            return [self] * num_layers
        return [self.layer_overrides.get(i, self) for i in range(num_layers)]

    def decode_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(begin, end)`` [B] int64: the visible run of each row of ``decode_slots``.

        Read off ``decode_mask`` (causal and sliding-window visibility is one contiguous run per
        row) once per step and kept for the other layers.
        """
        if self._decode_bounds is None:
            slots = self.decode_slots
            if slots is None:
                raise RuntimeError("decode tokens scheduled without decode_slots")
            batch, length = slots.shape
            if self.decode_mask is None:
                begin = torch.zeros(batch, dtype=torch.long, device=slots.device)
                end = torch.full((batch,), length, dtype=torch.long, device=slots.device)
            else:
                visible = self.decode_mask.reshape(batch, length).to(torch.int8)
                begin = visible.argmax(dim=1)  # first visible position
                end = length - visible.flip(1).argmax(dim=1)  # one past the last
            self._decode_bounds = (begin, end)
        return self._decode_bounds


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float | None = None,
) -> torch.Tensor:
    """Write ``k``/``v`` into the pool, then attend. Shapes: q [T, H, D]; k, v [T, KV, D];
    caches [num_slots, KV, D]. Returns [T, H, D]. ``scale`` multiplies the scores (default ``D ** -0.5``)."""
    recast = k_cache.dtype != q.dtype
    # A decode-only step on CPU writes (and rounds) in one kernel call; prefill chunks below attend
    # over their own rounded k/v, so a step with any keeps torch's write.
    if meta.prefills or not write_kv(k, v, k_cache, v_cache, meta.slot_mapping):
        if recast:  # the pool holds another dtype: round once here; attention below reads the rounded values
            k, v = k.to(k_cache.dtype), v.to(v_cache.dtype)
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
    num_decode = meta.num_decode_tokens
    if num_decode and not meta.prefills:
        return _decode(q, k_cache, v_cache, meta, scale)
    out = torch.empty_like(q)
    if num_decode:
        out[:num_decode] = _decode(q[:num_decode], k_cache, v_cache, meta, scale)
    for chunk in meta.prefills:
        s, e = chunk.token_start, chunk.token_end
        qs = q[s:e].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if chunk.context_slots is None:
            ks, vs = k[s:e], v[s:e]
        else:
            ks, vs = k_cache.index_select(0, chunk.context_slots), v_cache.index_select(0, chunk.context_slots)
        if recast:
            ks, vs = ks.to(q.dtype), vs.to(q.dtype)
        o = F.scaled_dot_product_attention(
            qs,
            ks.transpose(0, 1).unsqueeze(0),
            vs.transpose(0, 1).unsqueeze(0),
            attn_mask=chunk.mask,
            is_causal=chunk.mask is None and chunk.context_slots is None,
            enable_gqa=True,
            scale=scale,
        )
        out[s:e] = o[0].transpose(0, 1)
    return out


def _decode(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, scale: float | None
) -> torch.Tensor:
    slots = meta.decode_slots
    if slots is None:
        raise RuntimeError("decode tokens scheduled without decode_slots")
    batch, length = slots.shape
    if q.device.type == "cpu" and q.dtype == torch.float32:  # float32, bfloat16 or float16 pools
        begin, end = meta.decode_bounds()
        out = paged_decode_f32(q[:batch], k_cache, v_cache, slots, begin, end, q.shape[-1] ** -0.5 if scale is None else scale)
        if out is not None:
            return out
    flat = slots.view(-1)
    kd = k_cache.index_select(0, flat).view(batch, length, *k_cache.shape[1:]).transpose(1, 2)  # [B, KV, L, D]
    vd = v_cache.index_select(0, flat).view(batch, length, *v_cache.shape[1:]).transpose(1, 2)
    if kd.dtype != q.dtype:
        kd, vd = kd.to(q.dtype), vd.to(q.dtype)
    o = F.scaled_dot_product_attention(
        q[: slots.shape[0]].unsqueeze(2), kd, vd, attn_mask=meta.decode_mask, enable_gqa=True, scale=scale
    )  # [B, H, 1, D]
    return o.squeeze(2)
