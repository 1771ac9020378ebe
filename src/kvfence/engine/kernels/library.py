"""Load ``decode_f32.cpp`` (building it at first use) where it applies, or say once why not.

It applies on x86-64 Linux with AVX2 and FMA and a C++17 compiler; the products run on torch's
OpenMP threads when the compiler is GCC (whose libgomp torch uses), else on the calling thread. When it cannot be used (another
CPU or OS, no compiler, a failed build or a failed self-check) the reason is logged once and the
callers in :mod:`.ops` use torch. ``KVFENCE_CPU_KERNELS=0`` turns it off.

The library is built for AVX2; on a CPU with AVX-512F its register-tiled products (batches of 16
rows and more) run a zmm tile chosen at run time, which gives the AVX2 tile's bits (checked at load:
where they differ the AVX2 tile is kept). ``KVFENCE_CPU_ISA=avx2`` keeps the AVX2 tile anyway.

Batch-1 products choose how far ahead of their weight stream to prefetch by timing themselves on
the model's first decode steps (it helps on some CPUs and costs a fifth on others:
``decode_f32.cpp``'s ``PrefetchTuner``); ``KVFENCE_PREFETCH_BYTES=N`` fixes it (0: none), for both
runtimes.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from kvfence.engine.kernels.build import KernelBuildError, find_compiler
from kvfence.engine.kernels.loading import BASE_FLAGS, WEIGHT_KINDS, is_gcc, load_library
from kvfence.engine.kernels.packed_weights import pack_weight

__all__ = ["HALF_WEIGHT_KINDS", "KernelStatus", "cpu_kernels", "kernel_status", "reset_kernels", "set_tiled_isa", "tiled_isa"]

log = logging.getLogger(__name__)

_OFF_VALUES = {"0", "false", "off", "no"}

HALF_WEIGHT_KINDS = {torch.bfloat16: WEIGHT_KINDS["bfloat16"], torch.float16: WEIGHT_KINDS["float16"]}
"""Half-precision weight dtypes the products read directly (``kind`` in ``decode_f32.cpp``'s
``linear_typed``): each weight widened to float32 as it is loaded, every sum in float32."""

_ISA_NAMES = ("avx2", "avx512")  # kvfence_gemm_isa's levels


@dataclass(frozen=True)
class KernelStatus:
    """Whether the CPU kernels are in use, and if not, why."""

    enabled: bool
    reason: str
    library: Path | None = None


class _State:
    status: KernelStatus | None = None
    lib: ctypes.CDLL | None = None


_state = _State()


def cpu_kernels() -> ctypes.CDLL | None:
    """The loaded library with typed functions, or ``None`` when torch must be used."""
    if _state.status is None:
        kernel_status()
    return _state.lib


def kernel_status() -> KernelStatus:
    """Decide (building at first use, logged once) whether the CPU kernels are used here."""
    if _state.status is None:
        status, lib = _load()
        _state.status, _state.lib = status, lib
        if status.enabled:
            log.info("CPU fp32 decode kernels in use (%s)", status.library)
        elif status.reason.startswith("disabled"):
            log.info("CPU fp32 decode kernels %s; using torch", status.reason)
        else:
            log.warning("CPU fp32 decode kernels unavailable (%s); using torch", status.reason)
    return _state.status


def reset_kernels() -> None:
    """Forget the decision so the next call decides again (tests; after changing the env)."""
    _state.status = None
    _state.lib = None


def _load() -> tuple[KernelStatus, ctypes.CDLL | None]:
    if os.environ.get("KVFENCE_CPU_KERNELS", "1").strip().lower() in _OFF_VALUES:
        return KernelStatus(False, "disabled by KVFENCE_CPU_KERNELS"), None
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return KernelStatus(False, f"need x86-64 Linux, this is {sys.platform}/{platform.machine()}"), None
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith(("AVX2", "AVX512")):
        return KernelStatus(False, f"need AVX2 and FMA, torch reports CPU capability {capability}"), None
    flags = list(BASE_FLAGS)
    threads_note = ""
    compiler = find_compiler()
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        threads_note = " (products on one thread: torch does not use OpenMP here)"
    elif compiler is not None and not is_gcc(compiler):
        # Only GCC's OpenMP runtime (libgomp) is the one torch uses, shared by the loader, so the
        # products run on torch's own threads; another runtime would fight them for the cores.
        threads_note = f" (products on one thread: {compiler} is not GCC, set CXX=g++)"
    else:
        flags.append("-fopenmp")
    try:
        lib, path = load_library(flags)
    except (KernelBuildError, AttributeError) as exc:
        return KernelStatus(False, f"build failed: {exc}"), None
    problem = _self_check(lib)
    if problem is not None:
        return KernelStatus(False, f"self-check failed: {problem}", path), None
    return KernelStatus(True, f"in use ({_choose_isa(lib)} tiles)" + threads_note, path), lib


def _choose_isa(lib: ctypes.CDLL) -> str:
    """Set the tiled products' instruction set (the best the CPU has, unless ``KVFENCE_CPU_ISA``
    asks for less) once the AVX-512 tile is shown to give the AVX2 tile's bits; returns its name."""
    wanted = os.environ.get("KVFENCE_CPU_ISA", "auto").strip().lower() or "auto"
    if wanted not in (*_ISA_NAMES, "auto"):
        log.warning("KVFENCE_CPU_ISA=%s is not one of avx2, avx512, auto: using auto", wanted)
        wanted = "auto"
    level = int(lib.kvfence_gemm_isa(_ISA_NAMES.index(wanted) if wanted != "auto" else len(_ISA_NAMES)))
    if level > 0 and not _isa_levels_agree(lib, level):
        log.warning("CPU kernels: the AVX-512 tile differs from the AVX2 tile here; using AVX2")
        level = int(lib.kvfence_gemm_isa(0))
    return _ISA_NAMES[level]


def _isa_levels_agree(lib: ctypes.CDLL, level: int) -> bool:
    """The tiled products at ``level`` give the bits of the AVX2 tile (bias, odd sizes, 1-64+ rows)."""
    gen = torch.Generator().manual_seed(1)
    try:
        for rows, out_features, in_features in ((16, 25, 19), (37, 13, 70), (70, 30, 33)):
            x = torch.randn(rows, in_features, generator=gen)
            w = torch.randn(out_features, in_features, generator=gen)
            b = torch.randn(out_features, generator=gen)
            got = []
            for lvl in (0, level):
                lib.kvfence_gemm_isa(lvl)
                y = torch.full((rows, out_features), float("nan"))
                lib.kvfence_linear_f32(x.data_ptr(), rows, x.stride(0), w.data_ptr(), out_features, in_features,
                                       b.data_ptr(), y.data_ptr(), 1 << 30, 1, 1, None)
                got.append(y)
            if not torch.equal(got[0], got[1]):
                return False
        return True
    finally:
        lib.kvfence_gemm_isa(level)


def tiled_isa() -> str | None:
    """The instruction set of the tiled products (``"avx2"`` or ``"avx512"``), ``None`` without kernels."""
    lib = cpu_kernels()
    return None if lib is None else _ISA_NAMES[int(lib.kvfence_gemm_isa(-1))]


def set_tiled_isa(name: str) -> str | None:
    """Run the tiled products with ``name`` (``"avx2"``, or ``"avx512"`` where the CPU has it: never
    more than it has); returns the one now in use (tests and benchmarks). ``None`` without kernels."""
    if name not in _ISA_NAMES:
        raise ValueError(f"unknown instruction set {name!r}: one of {', '.join(_ISA_NAMES)}")
    lib = cpu_kernels()
    return None if lib is None else _ISA_NAMES[int(lib.kvfence_gemm_isa(_ISA_NAMES.index(name)))]


def _self_check(lib: ctypes.CDLL) -> str | None:
    """Compare every kernel with torch in float64 on odd shapes (strided input and bias included)."""
    gen = torch.Generator().manual_seed(0)
    for rows, out_features, in_features in ((1, 37, 29), (3, 9, 70), (7, 13, 16), (2, 1500, 24), (70, 29, 19)):
        x = torch.randn(rows, in_features + 3, generator=gen)[:, :in_features]
        w = torch.randn(out_features, in_features, generator=gen)
        b = torch.randn(out_features, generator=gen)
        y = torch.empty(rows, out_features)
        want_y = F.linear(x.double(), w.double(), b.double())
        panels = pack_weight(w)
        for threads in (1, max(2, torch.get_num_threads())):  # the caller alone, and shared (small chunks)
            # the register-tiled form (unpacked, then packed), then the dot-product form
            for broadcast_rows, packed in ((1, None), (1, panels), (rows + 1, None)):
                y.fill_(float("nan"))
                lib.kvfence_linear_f32(x.data_ptr(), rows, x.stride(0), w.data_ptr(), out_features, in_features,
                                       b.data_ptr(), y.data_ptr(), 0, threads, broadcast_rows,
                                       None if packed is None else packed.data_ptr())
                if not torch.allclose(y.double(), want_y, rtol=1e-5, atol=1e-4):
                    form = "dot" if broadcast_rows > rows else "tiled" if packed is None else "tiled, packed"
                    return f"linear ({form}) {(rows, in_features)} x {(out_features, in_features)} on {threads} threads"
            for dtype, kind in HALF_WEIGHT_KINDS.items():  # half weights, widened exactly, summed in float32
                half = w.to(dtype)
                want_half = F.linear(x.double(), half.double(), b.double())
                for broadcast_rows in (1, rows + 1):
                    y.fill_(float("nan"))
                    lib.kvfence_linear_typed(x.data_ptr(), rows, x.stride(0), half.data_ptr(), kind, out_features,
                                             in_features, b.data_ptr(), y.data_ptr(), 0, threads, broadcast_rows, None)
                    if not torch.allclose(y.double(), want_half, rtol=1e-5, atol=1e-4):
                        form = "dot" if broadcast_rows > rows else "tiled"
                        return f"linear ({form}, {dtype} weights) {(rows, in_features)} x {(out_features, in_features)}"
        norm = torch.empty(rows, in_features)
        lib.kvfence_rms_norm_f32(
            x.data_ptr(), rows, x.stride(0), in_features, w[0].data_ptr(), 1e-6, norm.data_ptr(), 1
        )
        want = F.rms_norm(x.double(), (in_features,), w[0].double(), 1e-6)
        if not torch.allclose(norm.double(), want, rtol=1e-5, atol=1e-5):
            return f"rms_norm {(rows, in_features)}"
        gate_up = torch.randn(rows, 2 * in_features, generator=gen)
        act = torch.empty(rows, in_features)
        lib.kvfence_silu_mul_f32(gate_up.data_ptr(), rows, in_features, act.data_ptr(), 1)
        g, u = gate_up.double().chunk(2, dim=-1)
        if not torch.allclose(act.double(), F.silu(g) * u, rtol=1e-5, atol=1e-6):
            return f"silu_mul {(rows, in_features)}"
    heads, head_dim = 5, 22
    x = torch.randn(3, heads + 2, head_dim, generator=gen)
    cos, sin = torch.randn(3, head_dim // 2, generator=gen), torch.randn(3, head_dim // 2, generator=gen)
    x1, x2 = x[:, :heads].double().chunk(2, dim=-1)
    c, s = cos.double()[:, None], sin.double()[:, None]
    want = torch.cat((x[:, heads:].double(),), dim=1)
    rotated = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    lib.kvfence_rope_f32(x.data_ptr(), 3, x.stride(0), heads, head_dim, cos.data_ptr(), sin.data_ptr(), cos.stride(0), 1)
    if not torch.allclose(x[:, :heads].double(), rotated, rtol=1e-5, atol=1e-5) or not torch.equal(
        x[:, heads:].double(), want
    ):
        return "rope"
    if not _elementwise_shared_equals_alone(lib, gen):
        return "elementwise kernels shared over threads differ from one thread"
    logits = torch.randn(4, 1001, generator=gen)
    logits[1, 17] = logits[1, 900] = 99.0  # a tie: the first wins
    logits[2, 5] = logits[2, 7] = float("nan")  # NaN ranks above every number: the first NaN
    logits[3] = float("-inf")
    picked = torch.empty(4, dtype=torch.long)
    lib.kvfence_argmax_f32(logits.data_ptr(), 4, logits.stride(0), logits.shape[1], picked.data_ptr())
    if not torch.equal(picked, logits.argmax(dim=-1)):
        return "argmax"
    return None


def _elementwise_shared_equals_alone(lib: ctypes.CDLL, gen: torch.Generator) -> bool:
    """A batch big enough to be shared over threads (prefill-sized) gives the bits of one thread."""
    rows, dim, heads = 301, 256, 4  # 77,056 floats: above the kernels' sharing threshold
    threads = max(2, torch.get_num_threads())
    x = torch.randn(rows, dim + 3, generator=gen)[:, :dim]
    w = torch.randn(dim, generator=gen)
    gate_up = torch.randn(rows, 2 * dim, generator=gen)
    cos, sin = torch.randn(rows, dim // (2 * heads), generator=gen), torch.randn(rows, dim // (2 * heads), generator=gen)
    results = []
    for n in (1, threads):
        norm, act = torch.empty(rows, dim), torch.empty(rows, dim)
        lib.kvfence_rms_norm_f32(x.data_ptr(), rows, x.stride(0), dim, w.data_ptr(), 1e-6, norm.data_ptr(), n)
        lib.kvfence_silu_mul_f32(gate_up.data_ptr(), rows, dim, act.data_ptr(), n)
        rotated = gate_up.clone()  # [rows, 2 * heads heads of dim / heads], the first `heads` rotated
        lib.kvfence_rope_f32(rotated.data_ptr(), rows, rotated.stride(0), heads, dim // heads, cos.data_ptr(),
                             sin.data_ptr(), cos.stride(0), n)
        results.append((norm, act, rotated))
    return all(torch.equal(a, b) for a, b in zip(*results, strict=True))
