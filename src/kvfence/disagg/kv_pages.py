"""Page bytes in and out of a model runner's KV pool, and what both workers must agree on.

A page's payload is the K and V of its ``page_size`` slots for every layer, in the pool's own
layout ``[layers, K|V, page_size, kv_heads, head_dim]`` and dtype, as raw bytes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from kvfence.engine.runner.loader import checkpoint_files
from kvfence.engine.runner.model_runner import ModelRunner

__all__ = ["ChecksumPool", "kv_layout", "model_identity", "page_nbytes", "read_pages", "write_page"]


def kv_layout(runner: ModelRunner) -> dict[str, Any]:
    """The pool geometry a peer must share for pages to mean the same thing."""
    layers, _, _, page_size, heads, head_dim = runner.kv_pool.shape
    return {
        "layers": int(layers),
        "kv_heads": int(heads),
        "head_dim": int(head_dim),
        "page_size": int(page_size),
        "dtype": str(runner.kv_pool.dtype).removeprefix("torch."),
    }


def page_nbytes(runner: ModelRunner) -> int:
    pool = runner.kv_pool
    return pool[:, :, 0].numel() * pool.element_size()


def read_pages(runner: ModelRunner, page_ids: list[int]) -> list[memoryview]:
    """The current bytes of ``page_ids``: one batched copy off the device, one read-only view per page."""
    if not page_ids:
        return []
    index = torch.tensor(page_ids, dtype=torch.long, device=runner.device)
    pages = runner.kv_pool.index_select(2, index).movedim(2, 0).contiguous().cpu()  # [n, L, 2, ps, H, D]
    flat = memoryview(pages.view(torch.uint8).reshape(-1).numpy()).toreadonly()  # type: ignore[arg-type]
    size = len(flat) // len(page_ids)
    return [flat[i * size : (i + 1) * size] for i in range(len(page_ids))]


def write_page(runner: ModelRunner, page_id: int, payload: bytes) -> None:
    """Overwrite one page (all layers, K and V) with ``payload``; its size must be exact."""
    expected = page_nbytes(runner)
    if len(payload) != expected:
        raise ValueError(f"page payload has {len(payload)} bytes, the pool's pages have {expected}")
    target = runner.kv_pool[:, :, page_id]
    data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).view(target.dtype).view(target.shape)
    target.copy_(data.to(runner.device))


_SAMPLE_WINDOWS = 64  # windows of weight bytes hashed per checkpoint file
_WINDOW_BYTES = 64 << 10


def model_identity(model_dir: Path) -> str:
    """A digest of the checkpoint that both sides compare: config, weight file names and sizes,
    and the weight bytes themselves (whole files up to 4 MiB, else 64 evenly spread 64 KiB windows).

    Names and sizes alone are equal for a base model and any of its fine-tunes, and a decode worker
    must never continue over KV pages that another set of weights computed (I4). Sampling keeps the
    start-up cost at a few MiB read per file: a full fine-tune changes every window, a merged adapter
    the windows that land in the tensors it touches (in every layer, so many of the 64).
    """
    h = hashlib.blake2b(digest_size=16, person=b"kvfence-model")
    h.update((model_dir / "config.json").read_bytes())
    for f in sorted(checkpoint_files(model_dir)):
        size = f.stat().st_size
        h.update(f.name.encode() + b"\0" + str(size).encode() + b"\0")
        with open(f, "rb") as fh:
            if size <= _SAMPLE_WINDOWS * _WINDOW_BYTES:
                h.update(fh.read())
                continue
            step = (size - _WINDOW_BYTES) // (_SAMPLE_WINDOWS - 1)
            for i in range(_SAMPLE_WINDOWS):
                fh.seek(i * step)
                h.update(fh.read(_WINDOW_BYTES))
    return h.hexdigest()


class ChecksumPool:
    """Runs page checksums on a few threads (BLAKE2b releases the GIL on large buffers).

    Verifying gigabytes of KV on one core would dominate the time to first token of long prompts.
    """

    def __init__(self, max_workers: int | None = None) -> None:
        workers = max_workers or min(8, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvfence-checksum") if workers > 1 else None

    def map(self, fn: Callable[[int], bytes], items: Iterable[int]) -> Iterator[bytes]:
        todo = list(items)
        if self._pool is None or len(todo) < 4:
            return map(fn, todo)
        return self._pool.map(fn, todo)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
