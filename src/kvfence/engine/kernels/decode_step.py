"""A whole decode step's decoder layers as one kernel call (CPU, float32 compute).

:class:`.DecoderLayerKernel` made a layer two calls around attention; between them ran the
attention's Python (slicing q/k/v, the K/V write, the paged kernel's checks and call), 0.13-0.15 ms
a layer on the calling thread while the product threads waited (SmolLM-135M shape, bf16, batch 1:
one call gave 1.16x the tok/s at one thread, 1.25x at two; ``bench/decode_step_ab.py``). Here one call
(``kvfence_decode_step_f32``) runs for every layer: pre, the new K/V rows written into the pool at
the step's ``slot_mapping``, paged attention of each row over its own block table's slots, post.
Same kernels, same order as the per-layer path, so its results are bit for bit those of the
per-layer calls, which still run wherever this step does not apply (a prefill chunk in the batch,
a pool or shape the attention kernel does not take, the attention kernel off or failing its
self-check).

The KV pool is written here as :func:`.paged_attention.write_kv` would: every slot of
``slot_mapping`` is checked against every layer's pool before anything is written (``IndexError``
otherwise). Scrubbing freed pages (I2) stays the runner's, before the forward pass that this step is part of.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from kvfence.engine.kernels import paged_attention
from kvfence.engine.kernels.fused_layer import DecoderLayerKernel
from kvfence.engine.kernels.library import HALF_WEIGHT_KINDS, cpu_kernels
from kvfence.engine.kernels.loading import KvDecodeView, KvLayerAttention

if TYPE_CHECKING:
    from kvfence.engine.layers.attention import AttentionMetadata

__all__ = ["DecodeStepKernel"]

_KV_KINDS = {torch.float32: 0, **HALF_WEIGHT_KINDS}


def _pool_fits(k_cache: torch.Tensor, v_cache: torch.Tensor, kernel: DecoderLayerKernel) -> bool:
    return (
        k_cache.dtype in _KV_KINDS
        and v_cache.dtype == k_cache.dtype
        and k_cache.shape == v_cache.shape
        and k_cache.dim() == 3
        and tuple(k_cache.shape[1:]) == (kernel.num_kv_heads, kernel.head_dim)
        and k_cache.is_cpu
        and v_cache.is_cpu
        and k_cache.is_contiguous()
        and v_cache.is_contiguous()
        and kernel.num_heads % kernel.num_kv_heads == 0
        and (k_cache.dtype == torch.float32 or kernel.head_dim % 8 == 0)
        and paged_attention.covers(k_cache.dtype)
    )


class DecodeStepKernel:
    """Every layer's argument block and KV pool, as one decode step's call.

    Build it with :meth:`build` (``None`` when a layer's pool is not one the kernel reads); it holds
    the layer kernels and the pools, and :meth:`is_current` says whether it still describes them.
    """

    def __init__(
        self, lib: ctypes.CDLL, layers: Sequence[DecoderLayerKernel],
        kv_caches: Sequence[tuple[torch.Tensor, torch.Tensor]], scales: Sequence[float],
    ) -> None:
        self._lib = lib
        self._call = lib.kvfence_decode_step_f32
        self._layers = tuple(layers)
        self._caches = tuple(kv_caches)
        self._pointers = tuple((k.data_ptr(), v.data_ptr()) for k, v in kv_caches)
        self._addresses = (ctypes.c_void_p * len(layers))(*(layer.address for layer in layers))
        self._attention = (KvLayerAttention * len(layers))(*(
            KvLayerAttention(k.data_ptr(), v.data_ptr(), k.shape[0], _KV_KINDS[k.dtype], 0, scale)
            for (k, v), scale in zip(kv_caches, scales, strict=True)
        ))
        self._views = (KvDecodeView * 2)()
        self._overridden: frozenset[int] = frozenset()
        self.hidden = layers[0].hidden

    @classmethod
    def build(
        cls, layers: Sequence[DecoderLayerKernel], kv_caches: Sequence[tuple[torch.Tensor, torch.Tensor]],
        scales: Sequence[float],
    ) -> DecodeStepKernel | None:
        """The step over these layers and their pools (``scales``: each layer's attention scale), or
        ``None`` when a pool is not a contiguous CPU float32 / bfloat16 / float16 one of the layer's
        KV heads and head size, or the attention kernels are not in use here."""
        lib = cpu_kernels()
        if lib is None or not layers or not len(layers) == len(kv_caches) == len(scales):
            return None
        if len({layer.hidden for layer in layers}) != 1:
            return None
        if not all(_pool_fits(k, v, layer) for layer, (k, v) in zip(layers, kv_caches, strict=True)):
            return None
        return cls(lib, layers, kv_caches, scales)

    def is_current(
        self, layers: Sequence[DecoderLayerKernel], kv_caches: Sequence[tuple[torch.Tensor, torch.Tensor]]
    ) -> bool:
        """Whether this step still describes these layer kernels and pools, in the library in use."""
        if cpu_kernels() is not self._lib or len(layers) != len(self._layers) or len(kv_caches) != len(self._caches):
            return False
        if any(a is not b for a, b in zip(layers, self._layers, strict=True)):
            return False
        return all(
            k is k0 and v is v0 and k.data_ptr() == pk and v.data_ptr() == pv
            for (k, v), (k0, v0), (pk, pv) in zip(kv_caches, self._caches, self._pointers, strict=True)
        )

    def takes(self, x: torch.Tensor, meta: AttentionMetadata) -> bool:
        """Whether :meth:`run` runs this batch (the layers' ``takes`` already said yes for ``x``): a
        decode-only step, every token a decode row, slots and a slot mapping the kernel can read."""
        rows = x.shape[0]
        mapping = meta.slot_mapping
        return (
            not meta.prefills
            and meta.num_decode_tokens == rows
            and _view_fits(meta, rows)
            and mapping.shape == (rows,)
            and mapping.dtype == torch.int64
            and mapping.is_cpu
            and mapping.is_contiguous()
            and all(_view_fits(override, rows) for override in meta.layer_overrides.values())
            and len({id(m) for m in meta.layer_overrides.values()}) <= 1
        )

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """The hidden states [T, hidden] after every layer, for a batch that :meth:`takes` accepted;
        the step's K/V written into the pools on the way. ``IndexError`` (nothing written) for a
        slot outside a pool."""
        views = [meta]
        overridden = frozenset(meta.layer_overrides)
        if overridden:
            views.append(next(iter(meta.layer_overrides.values())))
        if overridden != self._overridden:
            for i, entry in enumerate(self._attention):
                entry.view = 1 if i in overridden else 0
            self._overridden = overridden
        kept = []  # the bounds tensors must live until the call returns
        for i, view in enumerate(views):
            slots = view.decode_slots
            if slots is None:  # takes() said otherwise
                raise RuntimeError("decode tokens scheduled without decode_slots")
            begin, end = view.decode_bounds()
            begin, end = begin.contiguous(), end.contiguous()
            kept.append((begin, end))
            self._views[i] = KvDecodeView(slots.data_ptr(), slots.stride(0), begin.data_ptr(), end.data_ptr())
        rows = x.shape[0]
        out = torch.empty(rows, self.hidden, dtype=torch.float32)
        status = self._call(
            self._addresses, self._attention, len(self._layers), self._views, x.data_ptr(), rows, x.stride(0),
            cos.data_ptr(), sin.data_ptr(), cos.stride(0), meta.slot_mapping.data_ptr(), out.data_ptr(),
            torch.get_num_threads(),
        )
        if status == 1:
            raise IndexError("a K/V slot outside the pool")
        if status != 0:
            raise RuntimeError(f"decode step kernel refused the layers' head layout (status {status})")
        return out


def _view_fits(view: AttentionMetadata, rows: int) -> bool:
    # decode slots the kernel reads: [rows, max slots] int64 on the CPU, unit stride along a row
    slots = view.decode_slots
    return (
        slots is not None
        and slots.dim() == 2
        and slots.shape[0] == rows
        and slots.dtype == torch.int64
        and slots.is_cpu
        and slots.stride(1) == 1
    )
