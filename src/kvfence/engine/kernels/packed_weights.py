"""Panel-major copies of fp32 weights for the decode kernels' tiled products (``packed_gemm.h``).

A decode step streams every weight from memory once. With a few batch rows (3-7: a server with a
handful of concurrent requests, or the tail of a batch) the products are bound by how fast the
weights arrive; read in the checkpoint's ``[out, in]`` layout the register tile follows 6 or 12
rows at once, which the hardware prefetcher tracks poorly. A copy laid out as panels of
:data:`PACK_WIDTH` output rows, ``[in][PACK_WIDTH]`` each, is one stream front to back: measured
on one core over a 30-layer decode step, 20-27 % less CPU time at 3-4 rows (``packed_gemm.h`` has
the table). From 8 rows the original layout's tile is as fast or faster, so only batches of
:data:`PACKED_MIN_ROWS` to :data:`PACKED_MAX_ROWS` rows read the panels. The results are bit for
bit those of the unpacked tile (the same FMAs in the same order).

The cost is memory: one more copy of each weight the decode step reads (for a 135M-parameter
fp32 model, 538 MB; for a 7B one, 28 GB), so it is **off by default**: memory a server spends twice
on weights is KV capacity it does not have. ``KVFENCE_PACKED_WEIGHTS=1`` turns it on.
Prefill keeps torch's products over the original weights.
"""

from __future__ import annotations

import os

import torch

from kvfence.engine.kernels.huge_pages import huge_page_empty

__all__ = ["PACKED_MAX_ROWS", "PACKED_MIN_ROWS", "PACK_WIDTH", "PackedWeight", "pack_weight", "packed_weights_enabled"]

PACK_WIDTH = 16
"""Output rows per panel (``kPackWidth`` in ``packed_gemm.h``)."""

PACKED_MIN_ROWS = 3
PACKED_MAX_ROWS = 7
"""Batch sizes whose products read the panels (``kMinRows`` .. ``kMaxRows`` in ``packed_gemm.h``):
fewer rows run the dot-product form, more the broadcast tile over the original weights. The
smallest is the broadcast tile's (``TILED_MIN_ROWS``), whose bits the panels give."""

_OFF_VALUES = {"0", "false", "off", "no"}


def packed_weights_enabled() -> bool:
    """Whether the decode kernels keep panel-major weight copies (``KVFENCE_PACKED_WEIGHTS``, default off)."""
    return os.environ.get("KVFENCE_PACKED_WEIGHTS", "0").strip().lower() not in _OFF_VALUES


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [out, in] (CPU float32) as ``[ceil(out / 16)][in][16]`` panels, the last one
    zero-padded, on huge pages where it can be."""
    if weight.dim() != 2 or weight.dtype != torch.float32 or not weight.is_cpu:
        raise ValueError(f"pack_weight needs a 2-D CPU float32 tensor, got {tuple(weight.shape)} {weight.dtype}")
    out_features, in_features = weight.shape
    panels = -(-out_features // PACK_WIDTH)
    packed = huge_page_empty((panels, in_features, PACK_WIDTH), torch.float32, torch.device("cpu"))
    with torch.no_grad():
        full = out_features // PACK_WIDTH
        if full:
            packed[:full].copy_(weight[: full * PACK_WIDTH].view(full, PACK_WIDTH, in_features).transpose(1, 2))
        if full < panels:
            rest = out_features - full * PACK_WIDTH
            packed[full].zero_()
            packed[full, :, :rest].copy_(weight[full * PACK_WIDTH :].t())
    return packed


class PackedWeight:
    """A weight and its panel-major copy, made now; :meth:`is_current` says whether the copy still
    matches (the same tensor, with the same storage and no in-place write since: torch's version
    counter; a write through ``param.data`` bypasses that counter, so code that does one after the
    first decode step must drop the copy, as the owners' ``drop_fused_kernel`` does)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.panels = pack_weight(weight)
        self._pointer = weight.data_ptr()
        self._version = _version(weight)

    def is_current(self, weight: torch.Tensor) -> bool:
        """Whether the panels are still ``weight``'s."""
        return weight is self.weight and weight.data_ptr() == self._pointer and _version(weight) == self._version


def _version(weight: torch.Tensor) -> int | None:
    # tensors made under torch.inference_mode() have no version counter (and cannot be written
    # in place outside it): for them only identity and storage are checked
    try:
        return weight._version
    except RuntimeError:
        return None
