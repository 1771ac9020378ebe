"""Arrays on transparent huge pages for the memory a step streams (the weights, the KV pool), as the
torch runtime places its tensors (:mod:`kvfence.engine.kernels.huge_pages` says why: 6-13 % less CPU
time in the products). The arrays of one call share one buffer, :data:`ALIGN` bytes apart, so only
the buffer's last huge page is partly used. Where huge pages are not available (or for less than one
huge page) they are plain ``numpy.empty`` arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvfence.engine.kernels.huge_page_advice import (
    ALIGN,
    HUGE_PAGE_BYTES,
    advise_huge_pages,
    huge_page_span,
    huge_pages_available,
)

__all__ = ["packed_empty"]

Spec = tuple[tuple[int, ...], type[np.generic]]


def packed_empty(specs: Sequence[Spec]) -> list[np.ndarray]:
    """Uninitialised C-contiguous arrays of these ``(shape, dtype)``, in one huge-page buffer where possible."""
    offsets, total = [], 0
    for shape, dtype in specs:
        offsets.append(total)
        total += -(-int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize // ALIGN) * ALIGN
    buffer = _advised_bytes(total)
    if buffer is None:
        return [np.empty(shape, dtype=dtype) for shape, dtype in specs]
    out = []
    for (shape, dtype), offset in zip(specs, offsets, strict=True):
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        out.append(buffer[offset : offset + nbytes].view(dtype).reshape(shape))
    return out


def _advised_bytes(nbytes: int) -> np.ndarray | None:
    """An untouched uint8 buffer of ``nbytes`` on a 2 MiB boundary, advised for huge pages, or ``None``."""
    if nbytes < HUGE_PAGE_BYTES or not huge_pages_available():
        return None
    length = huge_page_span(nbytes)
    raw = np.empty(length + HUGE_PAGE_BYTES, dtype=np.uint8)  # large: mmap'd by malloc, not yet touched
    start = -int(raw.ctypes.data) % HUGE_PAGE_BYTES  # the slack before and after is never touched
    buffer = raw[start : start + nbytes]
    return buffer if advise_huge_pages(int(buffer.ctypes.data), length) else None
