"""The kernel library's C interface, torch-free: its source, build flags, ctypes signatures and the
mirrors of its argument structures, and how to build and load it.

Both runtimes load ``decode_f32.cpp`` through :func:`load_library`: the torch path
(:mod:`.library`, with its torch self-check) and the native one (:mod:`kvfence.engine.native`,
with its numpy self-check). Same flags, same hash-named library in the cache (:mod:`.build`).
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

from kvfence.engine.kernels.build import build_and_load

__all__ = [
    "BASE_FLAGS",
    "MIN_PARALLEL_WEIGHTS",
    "SOURCE",
    "TILED_MIN_ROWS",
    "WEIGHT_KINDS",
    "KvDecodeView",
    "KvDecoderLayer",
    "KvLayerAttention",
    "KvLinear",
    "is_gcc",
    "load_library",
]

SOURCE = Path(__file__).with_name("decode_f32.cpp")
BASE_FLAGS = ("-O3", "-std=c++17", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off")
"""Every build's flags; ``-fopenmp`` is added where the products may share threads (GCC)."""

WEIGHT_KINDS = {"float32": 0, "bfloat16": 1, "float16": 2}
"""How ``linear_typed`` and the attention kernels read a stored array (``kind`` in ``decode_f32.cpp``):
half-precision values widened to float32 as they are loaded, every sum in float32."""

TILED_MIN_ROWS = 3
"""Fewest rows for the register-tiled form; fewer rows run the dot-product form. Measured on one
core over a decode step's products (538 MB of weights streamed from memory, 2026-11-30, since the
tiled form prefetches its next panel): equal at 2 rows, tiled 12-15 % less CPU time at 3 and 4,
30 % at 6. (With weights hot in the caches and without the prefetch it had been equal at 4.)"""

MIN_PARALLEL_WEIGHTS = 1 << 15
"""Weights (floats) below which the calling thread runs a whole product: sharing costs more.
Above it the product is shared over the caller's ``threads`` (OpenMP) threads."""

_p = ctypes.c_void_p
_long = ctypes.c_long

_SIGNATURES: dict[str, list[type]] = {
    # x, rows, ldx, w, out, in, bias, y, min_parallel_weights, threads, broadcast_rows, packed
    "kvfence_linear_f32": [_p, _long, _long, _p, _long, _long, _p, _p, _long, _long, _long, _p],
    # x, rows, ldx, dim, weight, eps, out, threads
    "kvfence_rms_norm_f32": [_p, _long, _long, _long, _p, ctypes.c_float, _p, _long],
    # gate_up, rows, inter, out, threads
    "kvfence_silu_mul_f32": [_p, _long, _long, _p, _long],
    # x, tokens, token_stride, heads, head_dim, cos, sin, table_stride, threads
    "kvfence_rope_f32": [_p, _long, _long, _long, _long, _p, _p, _long, _long],
    # x, rows, ldx, w, weight kind (WEIGHT_KINDS), out, in, bias, y, min_parallel_weights, threads,
    # broadcast_rows, packed
    "kvfence_linear_typed": [_p, _long, _long, _p, _long, _long, _long, _p, _p, _long, _long, _long, _p],
    # x, rows, ld, cols, out (int64)
    "kvfence_argmax_f32": [_p, _long, _long, _long, _p],
    # layer, x, rows, ldx, cos, sin, table_stride, qkv, threads
    "kvfence_layer_pre_f32": [_p, _p, _long, _long, _p, _p, _long, _p, _long],
    # layer, attn, rows, ld_attn, x, ldx, out, threads
    "kvfence_layer_post_f32": [_p, _p, _long, _long, _p, _long, _p, _long],
    # layers, attention, num_layers, views, x, rows, ldx, cos, sin, table_stride, slot_mapping, out, threads
    "kvfence_decode_step_f32": [_p, _p, _long, _p, _p, _long, _long, _p, _p, _long, _p, _p, _long],
    # wanted level (negative: only ask); returns the level
    "kvfence_gemm_isa": [_long],
    # weight kind, bytes (>= 0 fix, -1 choose again by timing, -2 only ask); returns the distance or -1
    "kvfence_prefetch_bytes": [_long, _long],
}
_RESTYPES: dict[str, type | None] = {
    "kvfence_decode_step_f32": ctypes.c_int,  # 0, or a code the caller turns into an exception
    "kvfence_gemm_isa": ctypes.c_long,
    "kvfence_prefetch_bytes": ctypes.c_long,
}


class KvLinear(ctypes.Structure):
    """``KvLinear`` of ``decode_f32.cpp`` (same field order)."""

    _fields_ = [
        ("weight", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("packed", ctypes.c_void_p),
        ("out", ctypes.c_long),
        ("in_", ctypes.c_long),
        ("kind", ctypes.c_long),  # how the weight is stored: WEIGHT_KINDS
    ]


class KvDecoderLayer(ctypes.Structure):
    """``KvDecoderLayer`` of ``decode_f32.cpp`` (same field order)."""

    _fields_ = [
        ("qkv", KvLinear),
        ("o", KvLinear),
        ("gate_up", KvLinear),
        ("down", KvLinear),
        ("input_norm", ctypes.c_void_p),
        ("post_norm", ctypes.c_void_p),
        ("eps", ctypes.c_float),
        ("hidden", ctypes.c_long),
        ("num_heads", ctypes.c_long),
        ("num_kv_heads", ctypes.c_long),
        ("head_dim", ctypes.c_long),
        ("min_parallel_weights", ctypes.c_long),
        ("broadcast_rows", ctypes.c_long),
        ("q_norm", ctypes.c_void_p),
        ("k_norm", ctypes.c_void_p),
    ]


class KvDecodeView(ctypes.Structure):
    """``KvDecodeView`` of ``decode_f32.cpp``: row ``b`` attends to ``slots[b * slots_stride + begin[b] :
    b * slots_stride + end[b]]``."""

    _fields_ = [("slots", ctypes.c_void_p), ("slots_stride", ctypes.c_long), ("begin", ctypes.c_void_p),
                ("end", ctypes.c_void_p)]


class KvLayerAttention(ctypes.Structure):
    """``KvLayerAttention`` of ``decode_f32.cpp``: one layer's pool and which view it reads."""

    _fields_ = [("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p), ("num_slots", ctypes.c_long),
                ("kv_kind", ctypes.c_long), ("view", ctypes.c_long), ("scale", ctypes.c_float)]


def load_library(flags: list[str]) -> tuple[ctypes.CDLL, Path]:
    """Build (cached) and load ``decode_f32.cpp`` with ``flags``, every entry point typed.
    :class:`~.build.KernelBuildError` when it cannot be built or loaded, ``AttributeError`` when an
    entry point is missing."""
    lib, path = build_and_load(SOURCE, flags)
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = _RESTYPES.get(name)
    return lib, path


def is_gcc(compiler: str) -> bool:
    """Whether ``compiler`` is GCC (whose OpenMP runtime, libgomp, torch uses too)."""
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    text = done.stdout.lower()
    return "clang" not in text and ("gcc" in text or "g++" in text or "free software foundation" in text)
