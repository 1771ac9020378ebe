"""Decode-step operations: the CPU kernels of ``decode_f32.cpp`` where they apply, torch elsewhere.

A kernel is used only for CPU float32 tensors of decode size (at most :data:`MAX_KERNEL_ROWS`
tokens for matrix products, :data:`MAX_ELEMENTWISE_ROWS` for the rest) and never under autograd;
CUDA, half precision and prefill-sized batches run the torch expression written next to each
call. Results equal torch's within float32 rounding, not bit for bit: the kernels sum in their
own order (eight lanes, then the lanes), as MKL sums in its own. RoPE is bit-exact.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from kvfence.engine.kernels.library import cpu_kernels

__all__ = [
    "MAX_ELEMENTWISE_ROWS",
    "MAX_KERNEL_ROWS",
    "calibrate_linear",
    "gemv_kernel_in_use",
    "linear",
    "rms_norm",
    "silu_mul",
    "try_rope_",
    "use_gemv_kernel",
]

MAX_KERNEL_ROWS = 16
"""Most tokens a matrix product runs in the kernel; larger batches are compute-bound GEMMs for torch."""

MAX_ELEMENTWISE_ROWS = 64
"""Most tokens an elementwise kernel takes (single-threaded; torch parallelises larger ones)."""

_MIN_PARALLEL_WEIGHTS = 1 << 15
"""Weights (floats) below which the calling thread runs a whole product: sharing costs more.
Above it the product is shared over ``torch.get_num_threads()`` (OpenMP) threads."""


class _Backend:
    gemv_kernel = True  # the products' kernel; calibrate_linear() may choose torch instead


def use_gemv_kernel(enabled: bool) -> None:
    """Use (or not) the kernel for decode products; the elementwise kernels are unaffected."""
    _Backend.gemv_kernel = enabled


def gemv_kernel_in_use() -> bool:
    return _Backend.gemv_kernel and cpu_kernels() is not None


def calibrate_linear(weights: Sequence[torch.Tensor], *, max_bytes: int = 64 << 20, repeats: int = 3) -> tuple[float, float] | None:
    """Time one-row products over ``weights`` (up to ``max_bytes`` of them) with torch and with the
    kernel, interleaved, best of ``repeats``, at the current thread count; keep the faster one for
    decode. Returns ``(torch_seconds, kernel_seconds)``, or ``None`` when the kernel does not apply.

    Why measure: torch's own fp32 GEMV is MKL's, which reaches the memory bandwidth on some CPUs
    (Intel Xeon: about 90 % of it, a little ahead of this kernel) and a third of it on others
    (AMD EPYC: single-threaded, 7 of 21 GB/s).
    """
    if cpu_kernels() is None:
        return None
    chosen: list[torch.Tensor] = []
    total = 0
    for w in weights:
        if w.dim() == 2 and w.is_contiguous() and w.dtype == torch.float32 and w.is_cpu and total < max_bytes:
            chosen.append(w)
            total += w.numel() * 4
    if not chosen:
        return None
    gen = torch.Generator().manual_seed(0)
    inputs = {w.shape[1]: torch.randn(1, w.shape[1], generator=gen) for w in chosen}
    best = {True: float("inf"), False: float("inf")}
    with torch.inference_mode():
        for _ in range(repeats):
            for kernel in (False, True):
                _Backend.gemv_kernel = kernel
                start = time.perf_counter()
                for w in chosen:
                    linear(inputs[w.shape[1]], w)
                best[kernel] = min(best[kernel], time.perf_counter() - start)
    _Backend.gemv_kernel = best[True] < best[False]
    return best[False], best[True]


def _fp32_cpu(*tensors: torch.Tensor) -> bool:
    # on the hot path: plain loops, and requires_grad only looked at when autograd is on
    for t in tensors:
        if t.dtype != torch.float32 or not t.is_cpu:
            return False
    if torch.is_grad_enabled():
        for t in tensors:
            if t.requires_grad:
                return False
    return True


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; for CPU fp32 decode batches, the bandwidth-bound kernel."""
    lib = cpu_kernels()
    if (
        lib is None
        or not _Backend.gemv_kernel
        or x.dim() != 2
        or weight.dim() != 2
        or not 0 < x.shape[0] <= MAX_KERNEL_ROWS
        or x.shape[1] != weight.shape[1]
        or weight.numel() == 0
        or not weight.is_contiguous()
        or not (_fp32_cpu(x, weight) if bias is None else _fp32_cpu(x, weight, bias))
        or (bias is not None and (bias.shape != (weight.shape[0],) or not bias.is_contiguous()))
    ):
        return F.linear(x, weight, bias)
    if x.stride(1) != 1 or x.stride(0) < x.shape[1]:
        x = x.contiguous()
    rows, out_features = x.shape[0], weight.shape[0]
    y = torch.empty(rows, out_features, dtype=torch.float32)
    lib.kvfence_linear_f32(
        x.data_ptr(), rows, x.stride(0), weight.data_ptr(), out_features, weight.shape[1],
        None if bias is None else bias.data_ptr(), y.data_ptr(), _MIN_PARALLEL_WEIGHTS, torch.get_num_threads(),
    )
    return y


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``F.rms_norm(x, weight.shape, weight, eps)`` over the last dimension of ``x`` [T, D]."""
    lib = cpu_kernels()
    if (
        lib is None
        or x.dim() != 2
        or not 0 < x.shape[0] <= MAX_ELEMENTWISE_ROWS
        or weight.shape != (x.shape[1],)
        or not weight.is_contiguous()
        or not _fp32_cpu(x, weight)
    ):
        return F.rms_norm(x, weight.shape, weight, eps)
    if x.stride(1) != 1 or x.stride(0) < x.shape[1]:
        x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.float32)
    lib.kvfence_rms_norm_f32(x.data_ptr(), x.shape[0], x.stride(0), x.shape[1], weight.data_ptr(), eps, out.data_ptr())
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up`` [T, 2 * I] laid out as ``[gate | up]``; returns [T, I]."""
    lib = cpu_kernels()
    if (
        lib is None
        or gate_up.dim() != 2
        or not 0 < gate_up.shape[0] <= MAX_ELEMENTWISE_ROWS
        or gate_up.shape[1] % 2
        or not gate_up.is_contiguous()
        or not _fp32_cpu(gate_up)
    ):
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up
    inter = gate_up.shape[1] // 2
    out = torch.empty(gate_up.shape[0], inter, dtype=torch.float32)
    lib.kvfence_silu_mul_f32(gate_up.data_ptr(), gate_up.shape[0], inter, out.data_ptr())
    return out


def try_rope_(x: torch.Tensor, num_heads: int, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Rotate-half RoPE in place on heads ``[0, num_heads)`` of ``x`` [T, heads, D] with ``cos`` and
    ``sin`` [T, 1, D/2]; True when the kernel did it, False when the caller must (torch)."""
    lib = cpu_kernels()
    if (
        lib is None
        or x.dim() != 3
        or not 0 < x.shape[0] <= MAX_ELEMENTWISE_ROWS
        or not 0 < num_heads <= x.shape[1]
        or x.shape[2] % 2
        or not x.is_contiguous()
        or cos.shape != (x.shape[0], 1, x.shape[2] // 2)
        or sin.shape != cos.shape
        or cos.stride() != sin.stride()
        or cos.stride(2) != 1
        or not _fp32_cpu(x, cos, sin)
    ):
        return False
    lib.kvfence_rope_f32(
        x.data_ptr(), x.shape[0], x.stride(0), num_heads, x.shape[2], cos.data_ptr(), sin.data_ptr(), cos.stride(0)
    )
    return True
