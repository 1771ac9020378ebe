"""Decode-step operations: the CPU kernels of ``decode_f32.cpp`` where they apply, torch elsewhere.

A kernel is used only for CPU float32 tensors, never under autograd: matrix products of decode
size (at most :data:`MAX_KERNEL_ROWS` tokens; MKL is as fast above), the elementwise kernels
(RMSNorm, ``silu(gate) * up``, RoPE) at any batch size, shared over torch's threads for prefill-sized
batches. CUDA and half precision run the torch expression written next to each call. Results equal torch's within float32 rounding, not bit for bit: the kernels sum in their
own order (eight lanes then the lanes, or one lane per output), as MKL sums in its own. RoPE is
bit-exact.

Products come in two forms: below :data:`TILED_MIN_ROWS` rows a dot-product kernel that streams
each weight row once for the batch (bound by memory bandwidth), from there up to
:data:`MAX_KERNEL_ROWS` a register-tiled one (``broadcast_gemm.h``, bound by the FMA units). The
engine times each against torch on its own weights at start and keeps the faster, per form.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F

from kvfence.engine.kernels.library import HALF_WEIGHT_KINDS, cpu_kernels
from kvfence.engine.kernels.loading import MIN_PARALLEL_WEIGHTS, TILED_MIN_ROWS

__all__ = [
    "CALIBRATION_ROWS",
    "MAX_KERNEL_ROWS",
    "MIN_PARALLEL_WEIGHTS",
    "TILED_MIN_ROWS",
    "LinearCalibration",
    "argmax_rows",
    "calibrate_linear",
    "gemv_kernel_in_use",
    "keeps_kernel",
    "kernel_runs_products",
    "linear",
    "rms_norm",
    "silu_mul",
    "tiled_kernel_in_use",
    "tiled_kernel_max_rows",
    "try_rope_",
    "use_gemv_kernel",
]

MAX_KERNEL_ROWS = 96
"""Most tokens a matrix product runs in the kernel. Above it torch's sgemm (MKL) is as fast on the
AMD EPYC it was tuned on (one core: kernel 57, MKL 59 GFLOP/s at 128 rows; 46 vs 29 at 24). Below it
:func:`calibrate_linear` may lower the limit (:func:`tiled_kernel_max_rows`) where MKL is faster."""

CALIBRATION_ROWS = (8, 16, 32, 64, MAX_KERNEL_ROWS)
"""Batch rows at which :func:`calibrate_linear` times the tiled form against torch, in this order:
the kernel keeps batches up to the last of them at which it was faster, every smaller one included.

Why several: torch's small-batch sgemm is not uniformly fast or slow. On an Intel Xeon with AVX-512
(2026-12-02, one core, a decode step's products streamed from memory) MKL took 107 ms at 8 rows
against the kernel's 60, was level at 32 and faster from 64 (181 vs 227 ms); timed at 32 rows alone,
the calibration gave every batch of 3-96 rows to MKL, and B=8 decode ran at 0.64x llama.cpp."""

class _Backend:
    gemv_kernel = True  # products of 1 .. TILED_MIN_ROWS - 1 rows; calibrate_linear() may choose torch
    tiled_max_rows = MAX_KERNEL_ROWS  # products of TILED_MIN_ROWS .. this many rows; likewise (torch above)


def use_gemv_kernel(enabled: bool, *, tiled: bool | int | None = None) -> None:
    """Use (or not) the kernel for products; ``tiled`` for batches of :data:`TILED_MIN_ROWS` rows and
    more (default: as ``enabled``): a bool for all of them up to :data:`MAX_KERNEL_ROWS`, or the most
    rows the kernel takes (torch above). The elementwise kernels are unaffected."""
    _Backend.gemv_kernel = enabled
    if tiled is None:
        tiled = enabled
    if isinstance(tiled, bool):
        _Backend.tiled_max_rows = MAX_KERNEL_ROWS if tiled else TILED_MIN_ROWS - 1
    else:
        _Backend.tiled_max_rows = max(TILED_MIN_ROWS - 1, min(MAX_KERNEL_ROWS, tiled))


def gemv_kernel_in_use() -> bool:
    """Whether products of fewer than :data:`TILED_MIN_ROWS` rows run the kernel."""
    return _Backend.gemv_kernel and cpu_kernels() is not None


def tiled_kernel_in_use() -> bool:
    """Whether products of :data:`TILED_MIN_ROWS` rows and more run the kernel (up to
    :func:`tiled_kernel_max_rows`)."""
    return _Backend.tiled_max_rows >= TILED_MIN_ROWS and cpu_kernels() is not None


def tiled_kernel_max_rows() -> int:
    """The most rows a product runs in the tiled kernel (torch above); below :data:`TILED_MIN_ROWS`
    when the tiled form is off (or the kernels are)."""
    return _Backend.tiled_max_rows if cpu_kernels() is not None else TILED_MIN_ROWS - 1


def _kernel_takes(rows: int) -> bool:
    # on the hot path; the caller has checked 0 < rows <= MAX_KERNEL_ROWS
    return _Backend.gemv_kernel if rows < TILED_MIN_ROWS else rows <= _Backend.tiled_max_rows


def kernel_runs_products(rows: int) -> bool:
    """Whether :func:`linear` runs a CPU float32 product of ``rows`` rows in the kernel (not torch)."""
    if not 0 < rows <= MAX_KERNEL_ROWS or cpu_kernels() is None:
        return False
    return _kernel_takes(rows)


@dataclass(frozen=True)
class LinearCalibration:
    """Best times (seconds) of the same products with torch and with the kernel, per form: one row,
    then the tiled form at each of ``tiled_rows`` (ascending; the sizes timed, which stop at the first
    one torch won by :func:`keeps_kernel`'s margin)."""

    torch_gemv_s: float
    kernel_gemv_s: float
    tiled_rows: tuple[int, ...]
    torch_tiled_s: tuple[float, ...]
    kernel_tiled_s: tuple[float, ...]

    @property
    def tiled_max_rows(self) -> int:
        """The most rows the tiled kernel keeps: the last timed size it kept (:func:`keeps_kernel`),
        with every one before."""
        best = TILED_MIN_ROWS - 1
        for rows, ours, theirs in zip(self.tiled_rows, self.kernel_tiled_s, self.torch_tiled_s, strict=True):
            if not keeps_kernel(theirs, ours, margin=TILED_TORCH_MARGIN):
                break
            best = rows
        return best


def calibrate_linear(
    weights: Sequence[torch.Tensor], *, max_bytes: int = 64 << 20, tiled_max_bytes: int = 16 << 20, repeats: int = 5
) -> LinearCalibration | None:
    """Time products over ``weights`` with torch and with the kernel, interleaved, best of
    ``repeats``, at the current thread count: one row over up to ``max_bytes`` of weights (the
    dot-product form) and each of :data:`CALIBRATION_ROWS` rows over up to ``tiled_max_bytes`` (the
    tiled form), until torch wins one. Keeps the kernel for each form unless torch was clearly faster
    (:func:`keeps_kernel`): the tiled form up to the last size it kept, torch above; ``None`` when
    the kernel does not apply.

    Why measure: torch's fp32 products are MKL's, which reaches the memory bandwidth for one row
    on some CPUs (Intel Xeon: about 90 % of it, a little ahead of this kernel) and a third of it on
    others (AMD EPYC: single-threaded, 7 of 21 GB/s), and whose small-batch sgemm is fast on some
    CPUs and half this kernel's speed on others (AMD EPYC, 16 to 64 rows).
    """
    if cpu_kernels() is None:
        return None
    usable = [w for w in weights if w.dim() == 2 and w.is_contiguous() and w.dtype == torch.float32 and w.is_cpu]
    if not usable:
        return None
    gen = torch.Generator().manual_seed(0)
    one_row = _time_forms(_take(usable, max_bytes), 1, repeats, gen)
    tiled_weights = _take(usable, tiled_max_bytes)
    sizes: list[int] = []
    tiled: list[tuple[float, float]] = []
    for rows in CALIBRATION_ROWS:
        sizes.append(rows)
        tiled.append(_time_forms(tiled_weights, rows, repeats, gen))
        if not keeps_kernel(*tiled[-1], margin=TILED_TORCH_MARGIN):
            break
    timings = LinearCalibration(
        one_row[0], one_row[1], tuple(sizes), tuple(t for t, _ in tiled), tuple(k for _, k in tiled)
    )
    _Backend.gemv_kernel = keeps_kernel(one_row[0], one_row[1], margin=GEMV_TORCH_MARGIN)
    _Backend.tiled_max_rows = timings.tiled_max_rows
    return timings


TORCH_MARGIN = 0.8
"""Torch's products are chosen only when they took under this fraction of the kernel's time."""

GEMV_TORCH_MARGIN = 0.5
"""The same for products of one or two rows (batch-1 decode): torch must take under half the
kernel's time. Measured, the kernel was within about 10 % of MKL's GEMV (Intel Xeon) or 3x faster
(AMD EPYC), while giving the form to torch takes batch-1 decode off the fused layer and step
kernels: on the SmolLM-135M shape at fp32 and 2 threads (2026-12-02, load ~2) a start-up whose
timings gave one row to MKL decoded at 25-29 tok/s, the kernel's path at 34-35."""

TILED_TORCH_MARGIN = 0.5
"""The same for each size of the tiled form (:data:`CALIBRATION_ROWS`). Its timings run over
weights the caches hold, which favour MKL's sgemm over a kernel whose edge is streaming from
memory: at 2 threads (Intel Xeon, 2026-12-02) an 8-row timing of 1.14 ms for MKL against 1.49 for
the kernel gave every batch to torch and B=8 decode ran at 108-150 tok/s, where a start-up that
kept the kernel decoded at 209 (the fused step path; llama.cpp 172)."""


def keeps_kernel(torch_s: float, kernel_s: float, *, margin: float = TORCH_MARGIN) -> bool:
    """Whether calibration keeps the kernel for a form, given the best seconds of each.

    Torch must be clearly faster (``margin``), not a little: giving the products to torch also
    takes the decode step off the fused layer and step kernels (a per-op path of some 900 torch ops
    a step), and on a loaded machine one disturbed timing made torch look faster than a kernel that
    ran at the memory bandwidth, after which every later step ran the slow path."""
    return not torch_s < margin * kernel_s


def _take(weights: list[torch.Tensor], max_bytes: int) -> list[torch.Tensor]:
    chosen: list[torch.Tensor] = []
    total = 0
    for w in weights:
        if total >= max_bytes:
            break
        chosen.append(w)
        total += w.numel() * 4
    return chosen


def _time_forms(weights: list[torch.Tensor], rows: int, repeats: int, gen: torch.Generator) -> tuple[float, float]:
    """Best seconds of torch's and of the kernel's products over ``weights``, ``rows`` rows each."""
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1], generator=gen) for w in weights}
    best = [float("inf"), float("inf")]
    saved = (_Backend.gemv_kernel, _Backend.tiled_max_rows)
    try:
        with torch.inference_mode():
            # One untimed round first: the first products of a process pay for starting OpenMP's
            # threads, first-touch page faults and the kernel's scratch; timed, they made torch
            # look faster at one row on AMD EPYC in one start out of a few (36.7 vs 39.7 ms, then
            # 21 vs 15 in the same process), and every later decode step ran torch's slower GEMV.
            # The order alternates by round, so neither form always runs just after the other
            # (whose passes may leave part of the weights in the caches, or the neighbours busy).
            for round_index in range(repeats + 1):
                for kernel in (False, True) if round_index % 2 else (True, False):
                    use_gemv_kernel(kernel)
                    start = time.perf_counter()
                    for w in weights:
                        linear(inputs[w.shape[1]], w)
                    if round_index > 0:
                        best[kernel] = min(best[kernel], time.perf_counter() - start)
    finally:
        _Backend.gemv_kernel, _Backend.tiled_max_rows = saved
    return best[0], best[1]


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


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, packed: torch.Tensor | None = None
) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; for CPU fp32 batches of up to :data:`MAX_KERNEL_ROWS` rows, the kernel.

    ``packed``: ``weight``'s panel-major copy (:func:`.packed_weights.pack_weight`), which the tiled
    form reads instead of ``weight`` (same results, bit for bit; faster from memory).

    A bfloat16 or float16 ``weight`` under a float32 ``x`` (the CPU's half-precision weights, see
    :mod:`.half_weights`) is read as stored and widened to float32 as it is loaded, every sum in
    float32; batches the kernel does not take run torch over a float32 copy of the weight."""
    if weight.dtype in HALF_WEIGHT_KINDS and x.dtype == torch.float32:
        return _linear_half_weight(x, weight, bias)
    lib = cpu_kernels()
    if (
        lib is None
        or x.dim() != 2
        or weight.dim() != 2
        or not 0 < x.shape[0] <= MAX_KERNEL_ROWS
        or not _kernel_takes(x.shape[0])
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
        None if bias is None else bias.data_ptr(), y.data_ptr(), MIN_PARALLEL_WEIGHTS, torch.get_num_threads(),
        TILED_MIN_ROWS, _panels_pointer(packed, weight),
    )
    return y


def _linear_half_weight(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    lib = cpu_kernels()
    if (
        lib is None
        or x.dim() != 2
        or weight.dim() != 2
        or not 0 < x.shape[0] <= MAX_KERNEL_ROWS
        or x.shape[1] != weight.shape[1]
        or weight.numel() == 0
        or not weight.is_contiguous()
        or not weight.is_cpu
        or not (_fp32_cpu(x) if bias is None else _fp32_cpu(x, bias))
        or (torch.is_grad_enabled() and weight.requires_grad)
        or (bias is not None and (bias.shape != (weight.shape[0],) or not bias.is_contiguous()))
    ):
        return F.linear(x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype))
    if x.stride(1) != 1 or x.stride(0) < x.shape[1]:
        x = x.contiguous()
    rows, out_features = x.shape[0], weight.shape[0]
    y = torch.empty(rows, out_features, dtype=torch.float32)
    lib.kvfence_linear_typed(
        x.data_ptr(), rows, x.stride(0), weight.data_ptr(), HALF_WEIGHT_KINDS[weight.dtype], out_features,
        weight.shape[1], None if bias is None else bias.data_ptr(), y.data_ptr(), MIN_PARALLEL_WEIGHTS,
        torch.get_num_threads(), TILED_MIN_ROWS, None,
    )
    return y


def _panels_pointer(packed: torch.Tensor | None, weight: torch.Tensor) -> int | None:
    if packed is None:
        return None
    out_features, in_features = weight.shape
    if packed.shape != (-(-out_features // 16), in_features, 16) or not packed.is_contiguous() or not _fp32_cpu(packed):
        raise ValueError(f"packed weights of shape {tuple(packed.shape)} do not match a weight {tuple(weight.shape)}")
    return packed.data_ptr()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``F.rms_norm(x, weight.shape, weight, eps)`` over the last dimension of ``x`` [T, D].

    The kernel is one pass per row where torch's CPU form made several over the whole batch: at a
    prefill of 2,048 tokens x 576, 0.4 ms against 6.7 ms of one core (2026-11-30, AMD EPYC)."""
    lib = cpu_kernels()
    if (
        lib is None
        or x.dim() != 2
        or x.shape[0] == 0
        or weight.shape != (x.shape[1],)
        or not weight.is_contiguous()
        or not _fp32_cpu(x, weight)
    ):
        return F.rms_norm(x, weight.shape, weight, eps)
    if x.stride(1) != 1 or x.stride(0) < x.shape[1]:
        x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.float32)
    lib.kvfence_rms_norm_f32(
        x.data_ptr(), x.shape[0], x.stride(0), x.shape[1], weight.data_ptr(), eps, out.data_ptr(),
        torch.get_num_threads(),
    )
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up`` [T, 2 * I] laid out as ``[gate | up]``; returns [T, I]."""
    lib = cpu_kernels()
    if (
        lib is None
        or gate_up.dim() != 2
        or gate_up.shape[0] == 0
        or gate_up.shape[1] % 2
        or not gate_up.is_contiguous()
        or not _fp32_cpu(gate_up)
    ):
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up
    inter = gate_up.shape[1] // 2
    out = torch.empty(gate_up.shape[0], inter, dtype=torch.float32)
    lib.kvfence_silu_mul_f32(gate_up.data_ptr(), gate_up.shape[0], inter, out.data_ptr(), torch.get_num_threads())
    return out


def try_rope_(x: torch.Tensor, num_heads: int, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Rotate-half RoPE in place on heads ``[0, num_heads)`` of ``x`` [T, heads, D] with ``cos`` and
    ``sin`` [T, 1, D/2]; True when the kernel did it, False when the caller must (torch)."""
    lib = cpu_kernels()
    if (
        lib is None
        or x.dim() != 3
        or x.shape[0] == 0
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
        x.data_ptr(), x.shape[0], x.stride(0), num_heads, x.shape[2], cos.data_ptr(), sin.data_ptr(), cos.stride(0),
        torch.get_num_threads(),
    )
    return True


def argmax_rows(logits: torch.Tensor) -> list[int]:
    """``logits.argmax(dim=-1).tolist()`` for ``logits`` [N, V]: the first of equal maxima, the first
    NaN of a row that has one. CPU float32 rows with unit stride run the kernel (vectorised; torch's
    reduction is scalar here), anything else torch."""
    lib = cpu_kernels()
    if (
        lib is None
        or logits.dim() != 2
        or logits.shape[1] == 0
        or logits.dtype != torch.float32
        or not logits.is_cpu
        or logits.stride(1) != 1
        or (logits.shape[0] > 1 and logits.stride(0) < logits.shape[1])
    ):
        return cast(list[int], logits.argmax(dim=-1).tolist())
    picked = torch.empty(logits.shape[0], dtype=torch.long)
    lib.kvfence_argmax_f32(logits.data_ptr(), logits.shape[0], logits.stride(0), logits.shape[1], picked.data_ptr())
    return cast(list[int], picked.tolist())
