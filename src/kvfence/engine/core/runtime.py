"""What runs the model: the array library under :class:`~kvfence.engine.core.engine_core.EngineCore`.

The engine's isolation core (page ledger, prefix index, scheduler, the step) is plain Python; what
computes over the pool is a *runtime*:

- ``torch`` (default): :class:`~kvfence.engine.runner.model_runner.ModelRunner` on PyTorch, CPU or
  CUDA, every model family and sampling option;
- ``native``: :class:`~kvfence.engine.native.runner.NativeRunner`, the CPU kernels driven from
  NumPy with no PyTorch in the process (about 220 MB less resident memory), the Llama-family models
  the kernels run, and every sampling option (prompt log-probabilities included).

Each runtime supplies the runner, the random generators and the sampler, so the engine never
imports an array library itself. Invariant I2 stays the runner's: every runner zero-fills the page
ledger's scrub list inside each call that reads or writes the pool.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kvfence.engine.sampling.sample_rows import Generator, SampledToken, SampleRow

if TYPE_CHECKING:
    from kvfence.engine.config import EngineConfig, ModelConfig
    from kvfence.engine.core.scheduler import ScheduledSeq
    from kvfence.engine.kv.page_ledger import PageLedger
    from kvfence.engine.sampling.prompt_logprobs import PromptScores
    from kvfence.engine.sampling.sampling_params import SamplingParams

__all__ = ["Runner", "Runtime", "host_pool_memory", "load_runtime", "runtime_class"]



class Runner(Protocol):
    """What the engine calls on its model runner (both runners have these)."""

    @property
    def device(self) -> Any: ...

    def execute(
        self, items: list[ScheduledSeq], prompt_scores: dict[str, PromptScores] | None = None
    ) -> tuple[list[ScheduledSeq], Any]: ...

    def scrub_released(self) -> None: ...

    def pages_are_zero(self, pages: list[int]) -> bool: ...

    # page bytes, for the disaggregated handoff (I4)
    @property
    def page_nbytes(self) -> int: ...

    def kv_layout(self) -> dict[str, int | str]: ...

    def read_pages(self, page_ids: list[int]) -> list[memoryview]: ...

    def write_page(self, page_id: int, payload: bytes) -> None: ...


class Runtime(Protocol):
    """One array library's runner, generators and sampler, built from the engine's config."""

    name: str
    device_name: str  # "cpu", "cuda:0" ...
    kv_element_size: int  # bytes of one K or V element in the pool

    def pool_memory(self, model_dir: Path) -> int:
        """Bytes the KV pool may take by default."""
        ...

    def runner(
        self, model_dir: Path, model_config: ModelConfig, *, max_len: int, num_pages: int, page_size: int,
        ledger: PageLedger,
    ) -> Runner: ...

    def generator(self, seed: int) -> Generator: ...

    def generator_state(self, generator: Generator) -> bytes:
        """``generator``'s state as bytes (the disaggregated handoff carries a seeded request's)."""
        ...

    def set_generator_state(self, generator: Generator, state: bytes) -> None:
        """Restore a state :meth:`generator_state` gave; ``ValueError`` for bytes that are not one."""
        ...

    def sample(self, logits: Any, rows: list[SampleRow], default_generator: Generator) -> list[SampledToken]: ...

    def check_params(self, params: SamplingParams) -> None:
        """Raise :class:`~kvfence.errors.InvalidParameterError` for what this runtime cannot sample."""
        ...


def runtime_class(name: str) -> Callable[[EngineConfig], Runtime]:
    """The runtime called ``name``, its array library imported now (only the one chosen): a missing one
    is the ``ModuleNotFoundError`` that the CLI turns into a line naming the extra to install."""
    if name == "native":
        from kvfence.engine.native.runtime import NativeRuntime

        return NativeRuntime
    from kvfence.engine.runner.torch_runtime import TorchRuntime

    return TorchRuntime


def load_runtime(config: EngineConfig) -> Runtime:
    """The runtime ``config.runtime`` names, built from ``config``."""
    return runtime_class(config.runtime)(config)


def host_pool_memory() -> int:
    """The default KV pool on the CPU: a quarter of the machine's RAM."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return total // 4

