"""What both workers must agree on (the checkpoint's identity), and the page checksums' thread pool.

Page bytes move in and out of the KV pool through the model runner itself
(:meth:`~kvfence.engine.runner.model_runner.ModelRunner.read_pages` and
:meth:`~kvfence.engine.runner.model_runner.ModelRunner.write_page`), which zero-fills released pages
first (I2); its :meth:`~kvfence.engine.runner.model_runner.ModelRunner.kv_layout` is the geometry
both sides compare.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kvfence.engine.runner.checkpoint import checkpoint_files

__all__ = ["ChecksumPool", "model_identity"]


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
