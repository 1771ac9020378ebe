"""Whether memory here can be backed by transparent huge pages, and the ``madvise`` that asks for it;
torch-free, for the torch runtime's tensors (:mod:`.huge_pages`, which says why) and the native
runtime's arrays (:mod:`kvfence.engine.native.memory`) alike."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["ALIGN", "HUGE_PAGE_BYTES", "advise_huge_pages", "huge_page_span", "huge_pages_available"]

log = logging.getLogger(__name__)

HUGE_PAGE_BYTES = 2 << 20
ALIGN = 64  # bytes between arrays packed into one buffer: a cache line, so AVX loads never split one
_MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux, every architecture
_THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_OFF_VALUES = {"0", "false", "off", "no"}


@cache
def _madvise() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def huge_pages_available() -> bool:
    """Whether buffers here are put on huge pages: Linux with THP not ``never``, and not turned off
    by ``KVFENCE_HUGE_PAGES=0``."""
    if os.environ.get("KVFENCE_HUGE_PAGES", "").strip().lower() in _OFF_VALUES:
        return False
    if _madvise() is None:
        return False
    try:
        mode = _THP_MODE.read_text()
    except OSError:
        return False
    return "[never]" not in mode


def huge_page_span(nbytes: int) -> int:
    """Bytes of whole huge pages that hold ``nbytes``; allocate this plus :data:`HUGE_PAGE_BYTES` of
    slack (never touched) to find a 2 MiB boundary inside."""
    return -(-nbytes // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES


def advise_huge_pages(address: int, length: int) -> bool:
    """``madvise(MADV_HUGEPAGE)`` on the untouched ``[address, address + length)`` (2 MiB aligned):
    its first writes then fault in huge pages. ``False`` (plain pages) where that fails."""
    madvise = _madvise()
    if madvise is None or madvise(address, length, _MADV_HUGEPAGE) != 0:
        log.debug("madvise(MADV_HUGEPAGE) failed (errno %d): plain pages", ctypes.get_errno())
        return False
    return True
