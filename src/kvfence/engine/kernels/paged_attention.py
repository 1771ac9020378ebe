"""Paged decode attention on CPU in float32: ``paged_attention_f32.cpp``, built at first use.

Queries and outputs are float32; the pool may be float32, or bfloat16 / float16 (the engine's
``kv_cache_dtype``, head_dim a multiple of 8), whose elements the kernel widens to float32 on load.
It runs where the decode kernels of :mod:`.library` run (x86-64 Linux, AVX2 and FMA, a C++17
compiler, not turned off by ``KVFENCE_CPU_KERNELS=0``) and only after a self-check against torch's
attention. Its threads are torch's OpenMP threads when the compiler is GCC; otherwise it runs on
the calling thread.
Anywhere else :func:`paged_decode_f32` returns ``None`` and the caller uses torch.
"""

from __future__ import annotations

import ctypes
import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from kvfence.engine.kernels.build import KernelBuildError, build_and_load, find_compiler
from kvfence.engine.kernels.library import kernel_status

__all__ = ["covers", "decode_kernel_reason", "paged_decode_f32", "reset_decode_kernel", "write_kv"]

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("paged_attention_f32.cpp")
_p = ctypes.c_void_p
_long = ctypes.c_long
# q, q_stride, batch, heads, kv_heads, head_dim, k_cache, v_cache, slots, slots_stride, begin, end, scale, out
_ARGTYPES: list[type] = [_p, _long, _long, _long, _long, _long, _p, _p, _p, _long, _p, _p, ctypes.c_float, _p]


# The kernel's entry point for each pool dtype.
_SYMBOLS = {
    torch.float32: "kvfence_paged_decode_f32",
    torch.bfloat16: "kvfence_paged_decode_bf16kv",
    torch.float16: "kvfence_paged_decode_f16kv",
}


# k, v, token_stride, tokens, width, slots, num_slots, k_cache, v_cache
_WRITE_ARGTYPES: list[type] = [_p, _p, _long, _long, _long, _p, _long, _p, _p]
_WRITE_SYMBOLS = {
    torch.float32: "kvfence_write_kv_f32",
    torch.bfloat16: "kvfence_write_kv_bf16",
    torch.float16: "kvfence_write_kv_f16",
}


class _State:
    def __init__(self) -> None:
        self.loaded = False
        self.fns: dict[torch.dtype, Callable[..., int]] | None = None
        self.writers: dict[torch.dtype, Callable[..., int]] = {}  # the K/V write kernel per pool dtype
        self.reason = "not loaded yet"


_state = _State()


def decode_kernel_reason() -> str:
    """``"in use"``, or why torch's attention runs instead (loads the kernel on first call)."""
    _kernels()
    return _state.reason


def covers(dtype: torch.dtype) -> bool:
    """Whether both the attention kernel and the K/V write kernel run over a ``dtype`` pool here
    (built, and past their self-checks): where :mod:`.decode_step` may run the same code in one call."""
    fns = _kernels()
    return fns is not None and dtype in fns and dtype in _state.writers


def reset_decode_kernel() -> None:
    """Forget the decision so the next call decides again (tests; after changing the env)."""
    _state.loaded, _state.fns, _state.writers, _state.reason = False, None, {}, "not loaded yet"


def paged_decode_f32(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    begin: torch.Tensor,
    end: torch.Tensor,
    scale: float,
) -> torch.Tensor | None:
    """Each row ``b`` of ``q`` [B, H, D] attends to pool slots ``slots[b, begin[b]:end[b]]``.

    ``q`` is float32; ``k_cache``/``v_cache`` are one layer's pool [num_slots, KV, D] in float32,
    bfloat16 or float16; ``slots`` [B, L], ``begin`` and ``end`` [B] are int64. Returns float32
    [B, H, D], or ``None`` when the kernel does not apply here.
    """
    fns = _kernels()
    fn = None if fns is None else fns.get(k_cache.dtype)
    if fn is None or not _applies(q, k_cache, v_cache, slots, begin, end):
        return None
    batch, heads, head_dim = q.shape
    if q.stride(2) != 1 or q.stride(1) != head_dim:
        q = q.contiguous()
    out = torch.empty(batch, heads, head_dim, dtype=torch.float32)
    status = fn(
        q.data_ptr(), q.stride(0), batch, heads, k_cache.shape[1], head_dim,
        k_cache.data_ptr(), v_cache.data_ptr(), slots.data_ptr(), slots.stride(0),
        begin.data_ptr(), end.data_ptr(), scale, out.data_ptr(),
    )
    if status != 0:
        raise RuntimeError(
            f"paged decode kernel rejected {heads} heads over {k_cache.shape[1]} KV heads of {head_dim} "
            f"({k_cache.dtype}), status {status}"
        )
    return out


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor) -> bool:
    """``k_cache.index_copy_(0, slots, k.to(k_cache.dtype))`` and the same for ``v``, in one kernel
    call; True when done, False when the kernel does not apply (the caller runs torch).

    ``k``, ``v`` [T, KV, D] float32, each token's KV * D values contiguous, the same row stride;
    the caches one layer's pool [num_slots, KV, D] (float32, bfloat16 or float16); ``slots`` [T]
    int64. A slot outside the pool raises ``IndexError`` and writes nothing, as ``index_copy_``.
    """
    if not _state.loaded:
        _kernels()
    fn = _state.writers.get(k_cache.dtype)
    if (
        fn is None
        or k.dim() != 3
        or k.shape != v.shape
        or k.stride() != v.stride()
        or k.dtype != torch.float32
        or v.dtype != torch.float32
        or k_cache.shape != v_cache.shape
        or k_cache.dtype != v_cache.dtype
        or k_cache.dim() != 3
        or k_cache.shape[1:] != k.shape[1:]
        or k.stride(2) != 1
        or k.stride(1) != k.shape[2]
        or slots.dtype != torch.int64
        or slots.dim() != 1
        or slots.shape[0] != k.shape[0]
        or not (k.is_cpu and v.is_cpu and k_cache.is_cpu and v_cache.is_cpu and slots.is_cpu)
        or not (k_cache.is_contiguous() and v_cache.is_contiguous() and slots.is_contiguous())
        or (torch.is_grad_enabled() and (k.requires_grad or v.requires_grad))
    ):
        return False
    width = k.shape[1] * k.shape[2]
    status = fn(k.data_ptr(), v.data_ptr(), k.stride(0), k.shape[0], width, slots.data_ptr(), k_cache.shape[0],
                k_cache.data_ptr(), v_cache.data_ptr())
    if status != 0:
        raise IndexError(f"a K/V slot outside the pool of {k_cache.shape[0]} slots")
    return True


def _applies(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
             begin: torch.Tensor, end: torch.Tensor) -> bool:
    if q.dim() != 3 or k_cache.dim() != 3 or slots.dim() != 2 or q.shape[0] != slots.shape[0]:
        return False
    if q.dtype != torch.float32 or k_cache.dtype != v_cache.dtype:
        return False
    if k_cache.dtype != torch.float32 and q.shape[2] % 8:  # 2-byte pools: the vector path only
        return False
    if not (q.is_cpu and k_cache.is_cpu and v_cache.is_cpu and slots.is_cpu):
        return False
    if k_cache.shape != v_cache.shape or q.shape[2] != k_cache.shape[2] or q.shape[1] % k_cache.shape[1]:
        return False
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()) or slots.stride(1) != 1:
        return False
    if any(t.dtype != torch.int64 for t in (slots, begin, end)):
        return False
    return begin.is_contiguous() and end.is_contiguous() and not (torch.is_grad_enabled() and q.requires_grad)


def _kernels() -> dict[torch.dtype, Callable[..., int]] | None:
    if not _state.loaded:
        _state.fns, _state.reason = _load()
        _state.loaded = True
        if _state.fns is not None:
            log.info("CPU paged decode attention kernel in use")
        else:
            log.info("CPU paged decode attention kernel not used (%s); using torch", _state.reason)
    return _state.fns


def _load() -> tuple[dict[torch.dtype, Callable[..., int]] | None, str]:
    status = kernel_status()  # same platform, compiler and switch as the other decode kernels
    if not status.enabled:
        return None, status.reason
    if not _has_f16c():
        return None, "the CPU lacks F16C (half-precision conversion), which the kernel uses"
    flags = ["-O3", "-std=c++17", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", *_openmp_flags()]
    fns: dict[torch.dtype, Callable[..., int]] = {}
    try:
        lib, _ = build_and_load(_SOURCE, flags)
        for dtype, symbol in _SYMBOLS.items():
            fn = getattr(lib, symbol)
            fn.argtypes = _ARGTYPES
            fn.restype = ctypes.c_int
            fns[dtype] = fn
    except (KernelBuildError, AttributeError) as exc:
        return None, f"build failed: {exc}"
    for dtype, fn in fns.items():
        problem = _self_check(fn, dtype)
        if problem is not None:
            log.warning("CPU paged decode attention kernel failed its self-check (%s); using torch", problem)
            return None, f"self-check failed: {problem}"
    writers: dict[torch.dtype, Callable[..., int]] = {}
    for dtype, symbol in _WRITE_SYMBOLS.items():
        writer = getattr(lib, symbol, None)
        if writer is None:
            continue
        writer.argtypes = _WRITE_ARGTYPES
        writer.restype = ctypes.c_int
        if _write_self_check(writer, dtype):
            writers[dtype] = writer
        else:
            log.warning("CPU K/V write kernel (%s pool) failed its self-check; using torch's index_copy_", dtype)
    _state.writers = writers
    return fns, "in use"


def _write_self_check(fn: Callable[..., int], dtype: torch.dtype) -> bool:
    """The pool after the kernel's write holds exactly what ``index_copy_`` of ``.to(dtype)`` leaves
    (rounding ties, overflow, subnormals and infinities included); a bad slot writes nothing."""
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(5, 7, 6, generator=gen) * torch.logspace(-42, 38, 6)
    qkv[0, 2, :4] = torch.tensor([float("inf"), float("-inf"), 65520.0, 3.0e38])
    qkv[1, 3, :3] = torch.tensor([1.00390625, 1.01171875, -1.00390625])  # bfloat16 ties: to even
    k, v = qkv[:, 1:3], qkv[:, 3:5]  # [5, 2, 6], token stride 42
    slots = torch.tensor([4, 0, 7, 2, 5])
    k_cache, v_cache = torch.zeros(9, 2, 6, dtype=dtype), torch.zeros(9, 2, 6, dtype=dtype)
    if fn(k.data_ptr(), v.data_ptr(), k.stride(0), 5, 12, slots.data_ptr(), 9, k_cache.data_ptr(), v_cache.data_ptr()):
        return False
    want_k, want_v = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
    want_k.index_copy_(0, slots, k.to(dtype))
    want_v.index_copy_(0, slots, v.to(dtype))
    bad = torch.tensor([1, 9])
    untouched = k_cache.clone()
    refused = fn(k.data_ptr(), v.data_ptr(), k.stride(0), 2, 12, bad.data_ptr(), 9, k_cache.data_ptr(), v_cache.data_ptr())
    return (
        torch.equal(k_cache.view(torch.int16 if dtype != torch.float32 else torch.int32),
                    want_k.view(torch.int16 if dtype != torch.float32 else torch.int32))
        and torch.equal(v_cache, want_v)
        and refused == 1
        and torch.equal(k_cache, untouched)
    )



def _has_f16c() -> bool:
    """Every AVX2 CPU kvfence knows has F16C; checked anyway where Linux says so."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # the AVX2 check already passed; F16C came with AVX2 on every x86-64 CPU
    return " f16c" in text


def _openmp_flags() -> list[str]:
    """``-fopenmp`` when torch runs on OpenMP and the compiler is GCC, so the kernel shares torch's
    libgomp and its thread count; otherwise the kernel runs on the calling thread alone (another
    OpenMP runtime in the same process would fight torch's threads for the cores)."""
    compiler = find_compiler()
    if compiler is None or "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return []
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    text = done.stdout.lower()
    is_gcc = "clang" not in text and ("gcc" in text or "free software foundation" in text)
    return ["-fopenmp"] if is_gcc else []


def _self_check(fn: Callable[..., int], dtype: torch.dtype) -> str | None:
    """Compare with float64 attention over the same (rounded) K/V on odd shapes: GQA, windows
    (begin > 0), small and large batches; head_dim 20 (the scalar path) for float32 pools only."""
    gen = torch.Generator().manual_seed(0)
    shapes = ((3, 6, 2, 20, 37), (2, 4, 4, 64, 5), (5, 8, 1, 72, 50), (17, 6, 3, 64, 40))
    for batch, heads, kv_heads, head_dim, length in shapes:
        if dtype != torch.float32 and head_dim % 8:
            continue
        k_cache = torch.randn(length * batch + 7, kv_heads, head_dim, generator=gen).to(dtype)
        v_cache = torch.randn(length * batch + 7, kv_heads, head_dim, generator=gen).to(dtype)
        slots = torch.randperm(k_cache.shape[0], generator=gen)[: batch * length].view(batch, length).contiguous()
        end = torch.randint(1, length + 1, (batch,), generator=gen)
        begin = torch.clamp(end - torch.randint(1, length + 1, (batch,), generator=gen), min=0)
        q = torch.randn(batch, heads, head_dim, generator=gen)
        scale = head_dim**-0.5
        out = torch.empty(batch, heads, head_dim)
        fn(q.data_ptr(), heads * head_dim, batch, heads, kv_heads, head_dim, k_cache.data_ptr(),
           v_cache.data_ptr(), slots.data_ptr(), slots.stride(0), begin.data_ptr(), end.data_ptr(), scale,
           out.data_ptr())
        for b in range(batch):
            s = slots[b, int(begin[b]) : int(end[b])]
            k = k_cache[s].double().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)  # [H, n, D]
            v = v_cache[s].double().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
            want = F.scaled_dot_product_attention(q[b].double()[:, None], k, v, scale=scale)[:, 0]
            if not torch.allclose(out[b].double(), want, rtol=1e-4, atol=1e-5):
                return f"batch {batch}, heads {heads}/{kv_heads}, head_dim {head_dim}, {dtype} pool"
    return None
