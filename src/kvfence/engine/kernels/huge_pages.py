"""CPU tensors on transparent huge pages (Linux) for the memory a decode step streams.

A CPU decode step reads every weight of the model (538 MB for the SmolLM-135M-shaped bench model
in float32) and every visible K/V row of the pool from memory. On 4 KiB pages that is a TLB miss
every 4 KiB, and under a hypervisor each miss is a two-level page walk. Backed by 2 MiB pages the
same products took 6-12 % less CPU time at 16 rows and 3-13 % at one row (one core, the bench
model's weight products, interleaved A/B in one process, 2026-11-30, busy machine).

Linux backs anonymous memory with 2 MiB pages only where the process asks for it
(``madvise(MADV_HUGEPAGE)``) when ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise``,
the common default; torch's allocator asks only under ``THP_MEM_ALLOC_ENABLE=1``, which has to be
set before torch's first allocation. So the weights and the KV pool are allocated here: an
untouched buffer, 2 MiB aligned, advised before its first write, whose pages the first write then
faults in as huge pages. Nothing changes but where the bytes live: values, shapes and dtypes are
torch's. Anywhere else (another OS, THP ``never``, a failed ``madvise``, a non-CPU device,
``KVFENCE_HUGE_PAGES=0``) the tensors are plain ``torch.empty`` / ``torch.zeros`` ones.
"""

from __future__ import annotations

import torch
from torch import nn

from kvfence.engine.kernels.huge_page_advice import (
    ALIGN,
    HUGE_PAGE_BYTES,
    advise_huge_pages,
    huge_page_span,
    huge_pages_available,
)

__all__ = ["HUGE_PAGE_BYTES", "huge_page_empty", "huge_page_zeros", "huge_pages_available", "place_on_huge_pages"]


def _advised_bytes(nbytes: int) -> torch.Tensor | None:
    """An untouched uint8 buffer of ``nbytes`` starting on a 2 MiB boundary, advised for huge
    pages; ``None`` when that is not possible here."""
    if not huge_pages_available():
        return None
    length = huge_page_span(nbytes)
    raw = torch.empty(length + HUGE_PAGE_BYTES, dtype=torch.uint8)  # large: mmap'd, not yet touched
    start = -raw.data_ptr() % HUGE_PAGE_BYTES  # the slack before and after is never touched
    buffer = raw[start : start + nbytes]
    return buffer if advise_huge_pages(buffer.data_ptr(), length) else None


def huge_page_empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty(shape, dtype=dtype, device=device)``, on huge pages where it can be."""
    numel = 1
    for n in shape:
        numel *= n
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    buffer = _advised_bytes(nbytes) if device.type == "cpu" and nbytes >= HUGE_PAGE_BYTES else None
    if buffer is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return buffer.view(dtype).view(shape)


def huge_page_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.zeros(shape, dtype=dtype, device=device)``, on huge pages where it can be."""
    return huge_page_empty(shape, dtype, device).zero_()


def place_on_huge_pages(module: nn.Module) -> int:
    """Move ``module``'s CPU parameters, per dtype, into one huge-page buffer each (values kept);
    returns the bytes moved (0 where huge pages are not available).

    Call it before anything keeps a parameter's data pointer (kernels' argument blocks do; they
    notice a moved tensor and rebuild, but a caller holding a view would keep the old storage).
    """
    by_dtype: dict[torch.dtype, list[nn.Parameter]] = {}
    for param in module.parameters():
        if param.device.type == "cpu" and param.numel() > 0:
            by_dtype.setdefault(param.dtype, []).append(param)
    moved = 0
    for dtype, params in by_dtype.items():
        size = torch.empty((), dtype=dtype).element_size()
        offsets, total = [], 0
        for param in params:
            offsets.append(total)
            total += -(-param.numel() * size // ALIGN) * ALIGN
        if total < HUGE_PAGE_BYTES:
            continue
        buffer = _advised_bytes(total)
        if buffer is None:
            return moved
        with torch.no_grad():
            for param, offset in zip(params, offsets, strict=True):
                dest = buffer[offset : offset + param.numel() * size].view(dtype).view(param.shape)
                dest.copy_(param.data)
                param.data = dest
        moved += total
    return moved
