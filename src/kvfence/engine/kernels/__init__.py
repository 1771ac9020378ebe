"""CPU kernels for the fp32 decode step, compiled at first use, each with a plain-torch fallback.

``linear`` streams the weights of a small decode batch close to memory bandwidth, and runs
batches of up to ``MAX_KERNEL_ROWS`` rows as register-tiled products, on torch's own threads (on
AMD EPYC torch's single-row fp32 GEMV reaches a third of the bandwidth and its small-batch sgemm
half this kernel's speed; where torch's is faster, ``calibrate_linear`` keeps torch's); ``rms_norm``, ``silu_mul`` and ``try_rope_``
do in one call what torch does in several small ops; :class:`DecoderLayerKernel` runs a decoder
layer's two halves around attention in one call each; ``argmax_rows`` picks greedy tokens. See :mod:`.library` for when they apply and
``KVFENCE_CPU_KERNELS=0`` to turn them off.

Names are imported lazily (PEP 562), so the torch-free modules of this package (:mod:`.loading`,
:mod:`.build`) load without torch: the native runtime (:mod:`kvfence.engine.native`) uses them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvfence.engine.kernels.fused_layer import DecoderLayerKernel
    from kvfence.engine.kernels.library import KernelStatus, cpu_kernels, kernel_status, reset_kernels
    from kvfence.engine.kernels.ops import (
        MAX_KERNEL_ROWS,
        TILED_MIN_ROWS,
        LinearCalibration,
        argmax_rows,
        calibrate_linear,
        gemv_kernel_in_use,
        linear,
        rms_norm,
        silu_mul,
        tiled_kernel_in_use,
        tiled_kernel_max_rows,
        try_rope_,
        use_gemv_kernel,
    )

__all__ = [
    "MAX_KERNEL_ROWS",
    "TILED_MIN_ROWS",
    "DecoderLayerKernel",
    "KernelStatus",
    "LinearCalibration",
    "argmax_rows",
    "calibrate_linear",
    "cpu_kernels",
    "gemv_kernel_in_use",
    "kernel_status",
    "linear",
    "reset_kernels",
    "rms_norm",
    "silu_mul",
    "tiled_kernel_in_use",
    "tiled_kernel_max_rows",
    "try_rope_",
    "use_gemv_kernel",
]

_HOME = {
    "DecoderLayerKernel": "kvfence.engine.kernels.fused_layer",
    **dict.fromkeys(("KernelStatus", "cpu_kernels", "kernel_status", "reset_kernels"), "kvfence.engine.kernels.library"),
}


def __getattr__(name: str) -> Any:
    if name in __all__:
        module = importlib.import_module(_HOME.get(name, "kvfence.engine.kernels.ops"))
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
