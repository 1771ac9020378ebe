"""Half-precision weights on the CPU: stored in 2 bytes, computed in float32.

A decode step reads every weight once per token, so its speed is set by the bytes of weights per
token: a bfloat16 or float16 copy halves them and doubles the memory-bandwidth roofline. CPUs
without native half-precision arithmetic (AVX2; AVX-512 without AMX) gain nothing from computing
in half, and torch's half-precision products and elementwise ops on such a CPU run far below that
roofline (the SmolLM-135M bench model decoded 18 tok/s in bfloat16 where float32 ran at 40). So
on the CPU ``dtype="bfloat16"`` / ``"float16"`` is a storage format, as a llama.cpp half GGUF is:

- the matrix weights (every :class:`FusedLinear` and the token embedding, hence a tied LM head)
  are stored in the half dtype, read as stored by the decode kernels and widened to float32 as
  they are loaded (exactly: a bfloat16 is the top half of a float32, and F16C widens float16);
  every sum is accumulated in float32;
- activations, norms, RoPE tables, biases and logits stay float32; the KV pool is the model's
  ``dtype`` unless ``kv_cache_dtype`` says otherwise.

The result is the float32 model run on weights rounded to the half dtype: closer to the float32
model than computing in half, through the same fused layer kernels as float32 (one code path; from
two batch rows the very same sums, bit for bit; a single row sums 64 half weights per step over
eight accumulators, which took batch-1 products from 6.5 to 8.1 GB/s on one core). CUDA keeps
computing in the half dtype.
"""

from __future__ import annotations

import torch

__all__ = ["HALF_DTYPES", "compute_and_weight_dtypes"]

HALF_DTYPES = (torch.bfloat16, torch.float16)


def compute_and_weight_dtypes(dtype: torch.dtype, device: torch.device) -> tuple[torch.dtype, torch.dtype]:
    """The dtype a model computes in and the dtype its matrix weights are stored in, for a model
    asked for in ``dtype`` on ``device``: ``(float32, dtype)`` for a half dtype on the CPU, else
    ``(dtype, dtype)``."""
    if device.type == "cpu" and dtype in HALF_DTYPES:
        return torch.float32, dtype
    return dtype, dtype
