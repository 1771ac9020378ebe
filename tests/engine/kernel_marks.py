"""Marks shared by the CPU-kernel test files."""

from __future__ import annotations

import os

import pytest

from kvfence.engine.kernels import kernel_status

__all__ = ["needs_kernels"]

needs_kernels = pytest.mark.skipif(
    os.environ.get("KVFENCE_CPU_KERNELS", "1") in ("0", "false", "off", "no") or not kernel_status().enabled,
    reason=f"CPU kernels not in use here: {kernel_status().reason}",
)
