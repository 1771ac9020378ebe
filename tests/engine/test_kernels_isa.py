"""The AVX-512 tile of the tiled products gives the AVX2 tile's bits, and falls back where the CPU lacks it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kvfence.engine.kernels import kernel_status, linear, reset_kernels, use_gemv_kernel
from kvfence.engine.kernels.library import set_tiled_isa, tiled_isa
from tests.engine.kernel_marks import needs_kernels


def _cpu_has_avx512f() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and " avx512f" in line for line in text.splitlines())


@pytest.fixture(autouse=True)
def kernel_products() -> Iterator[None]:
    """Products go to the kernel (whatever a calibration chose), with the CPU's best tile after."""
    use_gemv_kernel(True)
    yield
    use_gemv_kernel(True)
    set_tiled_isa("avx512")


def _both_isas(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.inference_mode():
        assert set_tiled_isa("avx2") == "avx2"
        narrow = linear(x, w, b)
        set_tiled_isa("avx512")
        wide = linear(x, w, b)
    return narrow, wide


@needs_kernels
@pytest.mark.parametrize("rows", [3, 15, 16, 17, 31, 32, 33, 40, 47, 48, 63, 64, 65, 80, 95, 96])
@pytest.mark.parametrize(("out_features", "in_features"), [(1, 1), (11, 7), (12, 64), (13, 130), (100, 33), (37, 576)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_avx512_tile_gives_the_avx2_tiles_bits(rows: int, out_features: int, in_features: int, with_bias: bool) -> None:
    g = torch.Generator().manual_seed(rows * 7919 + out_features * 31 + in_features)
    x = torch.randn(rows, in_features + 3, generator=g)[:, 1 : 1 + in_features]  # strided rows
    w = torch.randn(out_features, in_features, generator=g)
    b = torch.randn(out_features, generator=g) if with_bias else None
    narrow, wide = _both_isas(x, w, b)
    want = F.linear(x.double(), w.double(), None if b is None else b.double())
    assert torch.allclose(wide.double(), want, rtol=1e-5, atol=1e-4)
    assert torch.equal(narrow, wide)


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_avx512_tile_shared_over_threads_and_over_half_weights(threads: int, dtype: torch.dtype) -> None:
    """Weight rows shared over threads in chunks (a prefetch of the next chunk's rows at each
    chunk's end), and half weights widened into the float32 tile: the same bits at both levels."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(threads)
        for rows in (16, 32, 57, 96):
            x = torch.randn(rows, 576, generator=g)
            w = torch.randn(3 * 576 + 5, 576, generator=g).to(dtype)
            b = torch.randn(w.shape[0], generator=g)
            narrow, wide = _both_isas(x, w, b)
            assert torch.equal(narrow, wide), (rows, threads, dtype)
            want = F.linear(x.double(), w.double(), b.double())
            assert torch.allclose(wide.double(), want, rtol=1e-4, atol=1e-3)
    finally:
        torch.set_num_threads(saved)


@needs_kernels
def test_avx512_is_used_only_where_the_cpu_has_it() -> None:
    assert set_tiled_isa("avx512") == ("avx512" if _cpu_has_avx512f() else "avx2")  # never more than the CPU has
    assert tiled_isa() == set_tiled_isa("avx512")
    assert set_tiled_isa("avx2") == "avx2" == tiled_isa()
    with pytest.raises(ValueError, match="unknown instruction set"):
        set_tiled_isa("sse2")


@needs_kernels
def test_kvfence_cpu_isa_keeps_the_avx2_tile(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    try:
        monkeypatch.setenv("KVFENCE_CPU_ISA", "avx2")
        reset_kernels()
        status = kernel_status()
        assert status.enabled and "avx2 tiles" in status.reason
        assert tiled_isa() == "avx2"
        monkeypatch.setenv("KVFENCE_CPU_ISA", "avx9")
        reset_kernels()
        with caplog.at_level(logging.WARNING, logger="kvfence.engine.kernels.library"):
            status = kernel_status()
        assert "KVFENCE_CPU_ISA=avx9" in caplog.text
        assert status.enabled and tiled_isa() == ("avx512" if _cpu_has_avx512f() else "avx2")
    finally:
        monkeypatch.delenv("KVFENCE_CPU_ISA")
        reset_kernels()
        kernel_status()
