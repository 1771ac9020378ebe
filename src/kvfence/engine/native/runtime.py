"""The ``native`` runtime: :class:`.NativeRunner` (the CPU kernels from NumPy), NumPy generators and sampler.

Nothing here imports torch: a process that serves with ``runtime="native"`` never loads it (about
220 MB of resident memory: its libraries, C++ registrations and Python objects).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvfence.engine.core.runtime import host_pool_memory
from kvfence.engine.native import sampler
from kvfence.engine.native.dtypes import STORAGE
from kvfence.engine.native.sampler import NumpyGenerator

if TYPE_CHECKING:
    from kvfence.engine.config import EngineConfig, ModelConfig
    from kvfence.engine.kv.page_ledger import PageLedger
    from kvfence.engine.native.runner import NativeRunner
    from kvfence.engine.sampling.sample_rows import Generator, SampledToken, SampleRow
    from kvfence.engine.sampling.sampling_params import SamplingParams

__all__ = ["NativeRuntime"]

class NativeRuntime:
    """The CPU, weights in ``config.dtype`` (float32 or 2-byte), the pool in the resolved KV dtype."""

    name = "native"
    device_name = "cpu"

    def __init__(self, config: EngineConfig) -> None:
        self.dtype = config.dtype
        self.kv_dtype = config.resolved_kv_cache_dtype
        self.kv_element_size = np.dtype(STORAGE[self.kv_dtype]).itemsize
        self.num_threads = config.num_threads or _default_threads()

    def pool_memory(self, model_dir: Path) -> int:
        return host_pool_memory()

    def runner(
        self, model_dir: Path, model_config: ModelConfig, *, max_len: int, num_pages: int, page_size: int,
        ledger: PageLedger,
    ) -> NativeRunner:
        from kvfence.engine.native.runner import NativeRunner

        return NativeRunner(
            model_dir, model_config, max_len=max_len, num_pages=num_pages, page_size=page_size, dtype=self.dtype,
            kv_dtype=self.kv_dtype, ledger=ledger, num_threads=self.num_threads,
        )

    def generator(self, seed: int) -> NumpyGenerator:
        return NumpyGenerator(seed)

    def generator_state(self, generator: Generator) -> bytes:
        return json.dumps(generator.get_state(), sort_keys=True).encode()

    def set_generator_state(self, generator: Generator, state: bytes) -> None:
        try:
            generator.set_state(json.loads(state))
        except (ValueError, TypeError, KeyError) as exc:  # JSON that is not a PCG64 state
            raise ValueError(f"not a NumPy PCG64 state: {exc}") from exc

    def sample(self, logits: Any, rows: list[SampleRow], default_generator: Generator) -> list[SampledToken]:
        return sampler.sample(logits, rows, default_generator)

    def check_params(self, params: SamplingParams) -> None:
        """Every sampling parameter the engine takes runs here."""


def _default_threads() -> int:
    """The physical cores this process may run on (torch's default): one thread per core, not per
    hyperthread, since the products are bound by memory and each core's load/FMA units."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        try:
            siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            siblings = str(cpu)
        cores.add(siblings)
    return max(1, len(cores))
