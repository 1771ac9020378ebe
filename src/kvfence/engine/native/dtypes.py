"""The model dtypes of the native runtime as numpy stores them: float32, bfloat16 as its 16 bits
(``uint16``; numpy has no bfloat16), float16. Rounding is torch's, so a weight or a K/V row holds
the same bits as under the torch runtime."""

from __future__ import annotations

import numpy as np

__all__ = ["STORAGE", "to_bfloat16", "to_dtype", "widen"]

STORAGE: dict[str, type[np.generic]] = {"float32": np.float32, "bfloat16": np.uint16, "float16": np.float16}
"""The numpy storage of each model dtype name."""


def to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16 as torch's ``.to(torch.bfloat16)``: round to nearest even,
    every NaN to the quiet NaN 0x7FC0; its bits as ``uint16``."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bits = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    bits[np.isnan(x)] = 0x7FC0
    return bits


def widen(x: np.ndarray) -> np.ndarray:
    """``x`` as float32, exactly: a bfloat16 (``uint16``) is the top half of a float32."""
    if x.dtype == np.uint16:
        return (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return x.astype(np.float32, copy=False)


def to_dtype(x: np.ndarray, source: str, dtype: str) -> np.ndarray:
    """``x`` stored as safetensors dtype ``source`` (``"F32"``, ``"BF16"`` as ``uint16``, ``"F16"``)
    converted to the model dtype ``dtype``, as torch's ``.to()`` rounds (through float32, which holds
    every bfloat16 and float16 exactly)."""
    wide = widen(x) if source in ("BF16", "F16") else x.astype(np.float32, copy=False)
    if dtype == "float32":
        return wide
    return to_bfloat16(wide) if dtype == "bfloat16" else wide.astype(np.float16)
