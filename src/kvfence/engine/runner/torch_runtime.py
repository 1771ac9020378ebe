"""The ``torch`` runtime: :class:`.ModelRunner` on PyTorch (CPU or CUDA), torch generators, the torch sampler."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from kvfence.engine.core.runtime import host_pool_memory
from kvfence.engine.layers.sampler import sample
from kvfence.engine.runner.checkpoint import checkpoint_files
from kvfence.engine.runner.model_runner import ModelRunner, resolve_device, torch_dtype

if TYPE_CHECKING:
    from kvfence.engine.config import EngineConfig, ModelConfig
    from kvfence.engine.kv.page_ledger import PageLedger
    from kvfence.engine.sampling.sample_rows import Generator, SampledToken, SampleRow
    from kvfence.engine.sampling.sampling_params import SamplingParams

__all__ = ["TorchRuntime"]


class TorchRuntime:
    """PyTorch on ``config.device``, weights in ``config.dtype``, the pool in the resolved KV dtype."""

    name = "torch"

    def __init__(self, config: EngineConfig) -> None:
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        self.device = resolve_device(config.device)
        self.device_name = str(self.device)
        self.dtype = torch_dtype(config.dtype)
        self.kv_dtype = torch_dtype(config.resolved_kv_cache_dtype)
        self.kv_element_size = torch.empty(0, dtype=self.kv_dtype).element_size()

    def pool_memory(self, model_dir: Path) -> int:
        """A quarter of RAM on the CPU, half of what the weights leave on a GPU."""
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            weights = sum(f.stat().st_size for f in checkpoint_files(model_dir))
            return max(0, (free - weights) // 2)
        return host_pool_memory()

    def runner(
        self, model_dir: Path, model_config: ModelConfig, *, max_len: int, num_pages: int, page_size: int,
        ledger: PageLedger,
    ) -> ModelRunner:
        return ModelRunner(
            model_dir, model_config, max_len=max_len, num_pages=num_pages, page_size=page_size, dtype=self.dtype,
            device=self.device, ledger=ledger, kv_dtype=self.kv_dtype,
        )

    def generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(seed)

    def generator_state(self, generator: Generator) -> bytes:
        return bytes(cast(torch.Generator, generator).get_state().numpy().tobytes())

    def set_generator_state(self, generator: Generator, state: bytes) -> None:
        try:
            cast(torch.Generator, generator).set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        except RuntimeError as exc:
            raise ValueError(f"not a torch generator state: {exc}") from exc

    def sample(self, logits: Any, rows: list[SampleRow], default_generator: Generator) -> list[SampledToken]:
        return sample(logits, rows, cast(torch.Generator, default_generator))

    def check_params(self, params: SamplingParams) -> None:
        """Every sampling option runs here."""
