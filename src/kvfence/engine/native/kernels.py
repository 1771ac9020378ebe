"""The CPU kernel library for the native runtime: built and loaded without torch, self-checked with numpy.

Same source, flags and hash-named cache as the torch path (:mod:`kvfence.engine.kernels.loading`):
``-fopenmp`` under GCC, whose libgomp the library loads itself in a torch-free process. The native
runtime has no fallback: a CPU without AVX2, FMA and F16C (read from ``/proc/cpuinfo``), no
compiler, a failed build or a failed self-check is a :class:`ConfigError` saying why (``--runtime
torch`` runs anyway).
"""

from __future__ import annotations

import ctypes
import platform
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from kvfence.engine.kernels.build import KernelBuildError, find_compiler
from kvfence.engine.kernels.loading import (
    BASE_FLAGS,
    MIN_PARALLEL_WEIGHTS,
    TILED_MIN_ROWS,
    WEIGHT_KINDS,
    KvDecoderLayer,
    KvDecodeView,
    KvLayerAttention,
    KvLinear,
    is_gcc,
    load_library,
)
from kvfence.engine.native.dtypes import to_bfloat16, widen
from kvfence.errors import ConfigError

__all__ = ["REQUIRED_CPU_FLAGS", "NativeKernels", "native_kernels", "ptr"]

REQUIRED_CPU_FLAGS = ("avx2", "fma", "f16c")
_RUN_TORCH = "the native runtime has no fallback; --runtime torch runs without these kernels"


def ptr(a: np.ndarray | None) -> int | None:
    """The address of ``a``'s first element (``None`` for ``None``), for a kernel argument."""
    return None if a is None else int(a.ctypes.data)


@dataclass(frozen=True)
class NativeKernels:
    """The loaded library (every entry point typed) and where it came from."""

    lib: ctypes.CDLL
    library: Path
    openmp: bool

    def set_threads(self, threads: int) -> None:
        """Run the attention kernels (which share rows over OpenMP's threads) on ``threads`` threads
        when called from this thread (OpenMP keeps the count per thread: call it in the thread that
        runs the step); the products take their count per call."""
        if self.openmp:
            _omp_set_num_threads()(threads)


@cache
def _omp_set_num_threads() -> Any:
    fn = ctypes.CDLL("libgomp.so.1").omp_set_num_threads  # already loaded: the library's own libgomp
    fn.argtypes, fn.restype = [ctypes.c_int], None
    return fn


class _State:
    kernels: NativeKernels | None = None


_state = _State()


def native_kernels() -> NativeKernels:
    """The kernel library, built at first use and self-checked once per process; :class:`ConfigError`
    with the reason where it cannot be used."""
    if _state.kernels is None:
        _state.kernels = _load()
    return _state.kernels


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def _load() -> NativeKernels:
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        raise ConfigError(f"the native runtime needs x86-64 Linux, this is {sys.platform}/{platform.machine()}; "
                          f"{_RUN_TORCH}")
    missing = [f for f in REQUIRED_CPU_FLAGS if f not in cpu_flags()]
    if missing:
        raise ConfigError(f"the native runtime needs a CPU with {', '.join(REQUIRED_CPU_FLAGS)}; this one lacks "
                          f"{', '.join(missing)} (/proc/cpuinfo); {_RUN_TORCH}")
    compiler = find_compiler()
    openmp = compiler is not None and is_gcc(compiler)  # another OpenMP runtime than libgomp: one thread
    flags = [*BASE_FLAGS, "-fopenmp"] if openmp else list(BASE_FLAGS)
    try:
        lib, path = load_library(flags)
    except (KernelBuildError, AttributeError) as exc:
        raise ConfigError(f"the native runtime's CPU kernels cannot be built: {exc}; {_RUN_TORCH}") from exc
    kernels = NativeKernels(lib, path, openmp)
    problem = _self_check(lib)
    if problem is not None:
        raise ConfigError(f"the native runtime's CPU kernels ({path}) failed their self-check: {problem}; {_RUN_TORCH}")
    return kernels


# ---- self-check against numpy float64 ------------------------------------------------------------


def _close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-4) -> bool:
    return bool(np.allclose(got.astype(np.float64), want, rtol=rtol, atol=atol))


def _stored(w: np.ndarray, kind: str) -> np.ndarray:
    if kind == "float32":
        return w
    return to_bfloat16(w) if kind == "bfloat16" else w.astype(np.float16)


def _self_check(lib: ctypes.CDLL) -> str | None:
    """The products the runtime calls (``linear_typed`` over float32, bfloat16 and float16 weights, in
    both product forms, on one and two threads), ``rms_norm``, and a whole decode step over one small
    random layer, each against numpy in float64; the first that differs, named, or ``None``."""
    rng = np.random.default_rng(0)
    for rows, out_features, in_features in ((1, 37, 29), (3, 9, 70), (7, 13, 16), (2, 1500, 24), (70, 29, 19)):
        x = rng.standard_normal((rows, in_features + 3), dtype=np.float32)[:, :in_features]
        w = rng.standard_normal((out_features, in_features), dtype=np.float32)
        b = rng.standard_normal(out_features, dtype=np.float32)
        y = np.empty((rows, out_features), dtype=np.float32)
        for kind, code in WEIGHT_KINDS.items():
            stored = _stored(w, kind)
            want = x.astype(np.float64) @ widen(stored).astype(np.float64).T + b
            for threads in (1, 2):
                for broadcast_rows in (1, rows + 1):  # the register-tiled form, then the dot-product form
                    y.fill(np.nan)
                    lib.kvfence_linear_typed(ptr(x), rows, x.strides[0] // 4, ptr(stored), code, out_features,
                                             in_features, ptr(b), ptr(y), 0, threads, broadcast_rows, None)
                    if not _close(y, want):
                        form = "dot" if broadcast_rows > rows else "tiled"
                        return (f"linear ({form}, {kind} weights) {(rows, in_features)} x {(out_features, in_features)} "
                                f"on {threads} threads")
        norm = np.empty((rows, in_features), dtype=np.float32)
        lib.kvfence_rms_norm_f32(ptr(x), rows, x.strides[0] // 4, in_features, ptr(w[0]), 1e-6, ptr(norm), 1)
        if not _close(norm, _rms_norm(x.astype(np.float64), w[0], 1e-6), atol=1e-5):
            return f"rms_norm {(rows, in_features)}"
    for kv_kind in WEIGHT_KINDS:
        problem = _check_decode_step(lib, rng, kv_kind)
        if problem is not None:
            return problem
    return None


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w.astype(np.float64)


def _check_decode_step(lib: ctypes.CDLL, rng: np.random.Generator, kv_kind: str) -> str | None:
    """Three rows of one sequence (a prefill chunk, causal) through one layer with GQA, q/k norms and
    biases, K/V into a pool of ``kv_kind``, against numpy in float64."""
    hidden, heads, kv, d, inter, rows, slots_n = 16, 4, 2, 8, 24, 3, 8
    width = (heads + 2 * kv) * d

    def rand(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {"qkv": rand(width, hidden), "o": rand(hidden, heads * d), "gate_up": rand(2 * inter, hidden),
         "down": rand(hidden, inter)}
    qkv_bias, down_bias = rand(width), rand(hidden)
    bias: dict[str, np.ndarray | None] = {"qkv": qkv_bias, "o": None, "gate_up": None, "down": down_bias}
    norms = {n: (1 + rand(size, scale=0.1)) for n, size in (("in", hidden), ("post", hidden), ("q", d), ("k", d))}
    eps, scale = 1e-6, d**-0.5
    x = rand(rows, hidden, scale=1.0)
    cos, sin = rand(rows, d // 2, scale=1.0), rand(rows, d // 2, scale=1.0)
    mapping = np.array([2, 5, 7], dtype=np.int64)
    slots = mapping.copy()  # the sequence's slots, shared by its rows (stride 0)
    begin, end = np.zeros(rows, dtype=np.int64), np.arange(1, rows + 1, dtype=np.int64)
    pool_dtype = np.float32 if kv_kind == "float32" else np.uint16 if kv_kind == "bfloat16" else np.float16
    k_cache = np.zeros((slots_n, kv, d), dtype=pool_dtype)
    v_cache = np.zeros_like(k_cache)

    def lin(name: str) -> KvLinear:
        return KvLinear(ptr(w[name]), ptr(bias[name]), None, w[name].shape[0], w[name].shape[1], 0)

    layer = KvDecoderLayer(lin("qkv"), lin("o"), lin("gate_up"), lin("down"), ptr(norms["in"]), ptr(norms["post"]),
                           eps, hidden, heads, kv, d, MIN_PARALLEL_WEIGHTS, TILED_MIN_ROWS, ptr(norms["q"]),
                           ptr(norms["k"]))
    layers = (ctypes.c_void_p * 1)(ctypes.addressof(layer))
    attention = (KvLayerAttention * 1)(KvLayerAttention(ptr(k_cache), ptr(v_cache), slots_n, WEIGHT_KINDS[kv_kind],
                                                        0, scale))
    views = (KvDecodeView * 1)(KvDecodeView(ptr(slots), 0, ptr(begin), ptr(end)))
    out = np.full((rows, hidden), np.nan, dtype=np.float32)
    status = lib.kvfence_decode_step_f32(layers, attention, 1, views, ptr(x), rows, hidden, ptr(cos), ptr(sin),
                                         d // 2, ptr(mapping), ptr(out), 2)
    if status != 0:
        return f"decode step returned {status}"
    # the reference, in float64
    f = np.float64
    h = _rms_norm(x.astype(f), norms["in"], eps) @ w["qkv"].astype(f).T + qkv_bias
    qkv = h.reshape(rows, heads + 2 * kv, d)
    qkv[:, :heads] = _rms_norm(qkv[:, :heads], norms["q"], eps)
    qkv[:, heads : heads + kv] = _rms_norm(qkv[:, heads : heads + kv], norms["k"], eps)
    c, s = cos.astype(f)[:, None], sin.astype(f)[:, None]
    x1, x2 = qkv[:, : heads + kv, : d // 2].copy(), qkv[:, : heads + kv, d // 2 :].copy()
    qkv[:, : heads + kv] = np.concatenate((x1 * c - x2 * s, x2 * c + x1 * s), axis=-1)
    keys, values = qkv[:, heads : heads + kv], qkv[:, heads + kv :]
    if kv_kind != "float32":  # the pool holds them rounded; attention reads the rounded values
        keys, values = (widen(_stored(t.astype(np.float32), kv_kind)).astype(f) for t in (keys, values))
    if not _close(widen(k_cache[mapping]), keys, atol=1e-3 if kv_kind == "float32" else 2e-2):
        return f"decode step's K written into a {kv_kind} pool"
    attn = np.empty((rows, heads, d))
    for t in range(rows):
        for hd in range(heads):
            g = hd // (heads // kv)
            scores = keys[: t + 1, g] @ qkv[t, hd] * scale
            p = np.exp(scores - scores.max())
            attn[t, hd] = (p / p.sum()) @ values[: t + 1, g]
    h1 = x.astype(f) + attn.reshape(rows, -1) @ w["o"].astype(f).T
    gu = _rms_norm(h1, norms["post"], eps) @ w["gate_up"].astype(f).T
    g_, u_ = gu[:, :inter], gu[:, inter:]
    want = h1 + (g_ / (1 + np.exp(-g_)) * u_) @ w["down"].astype(f).T + down_bias
    if not _close(out, want, rtol=1e-4, atol=1e-3 if kv_kind == "float32" else 3e-2):
        return f"decode step over a {kv_kind} pool"
    return None
