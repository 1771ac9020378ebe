"""The spellings of a weight dtype that users bring from vLLM and torch, and what ``auto`` means here."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DTYPE_ALIASES", "parse_dtype"]

# spelling -> kvfence's dtype name; "auto" is resolved per device by parse_dtype.
DTYPE_ALIASES = {
    "float32": "float32", "float": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "half": "float16", "fp16": "float16",
    "auto": "auto",
}


def parse_dtype(value: str, model: str | Path | None, device: str) -> str:
    """``value`` resolved to a dtype name; ``auto`` is the checkpoint's bfloat16/float16 on a GPU and float32
    on the CPU (where the engine's kernels and its reference are float32). An unknown spelling is returned
    unchanged, for the caller's validation to name."""
    name = DTYPE_ALIASES.get(value.lower(), value)
    if name != "auto":
        return name
    if model is None or device == "cpu" or (device == "auto" and not _cuda_available()):
        return "float32"
    from kvfence.engine.config import ModelConfig  # config imports this module
    from kvfence.engine.runner.model_path import resolve_model_dir

    checkpoint = ModelConfig.from_dir(resolve_model_dir(str(model))).checkpoint_dtype
    return checkpoint if checkpoint in ("bfloat16", "float16") else "float32"


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())
