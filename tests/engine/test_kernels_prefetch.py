"""Batch-1 products choose their prefetch distance by timing themselves, and no distance moves a bit."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

from kvfence.engine.kernels.library import cpu_kernels
from kvfence.engine.kernels.loading import WEIGHT_KINDS
from tests.engine.kernel_marks import needs_kernels

pytestmark = needs_kernels

ASK, CHOOSE = -2, -1
CANDIDATES = (0, 768, 1536)  # decode_f32.cpp's kAheadCandidates
WINDOW, ROUNDS = 64, 3  # its kTuneJobs, kTuneRounds


def _kind(dtype: torch.dtype) -> int:
    return WEIGHT_KINDS[str(dtype).removeprefix("torch.")]


def _lib() -> ctypes.CDLL:
    lib = cpu_kernels()
    assert lib is not None
    return lib


@pytest.fixture(autouse=True)
def choose_again_after() -> Iterator[None]:
    yield
    for kind in WEIGHT_KINDS.values():
        _lib().kvfence_prefetch_bytes(kind, CHOOSE)


def _product(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, threads: int = 1) -> torch.Tensor:
    """One product through the kernel, batch-1 dot form (no threads below 2^30 weights unless asked)."""
    y = torch.full((x.shape[0], w.shape[0]), float("nan"))
    _lib().kvfence_linear_typed(x.data_ptr(), x.shape[0], x.stride(0), w.data_ptr(), _kind(w.dtype), w.shape[0], w.shape[1],
                                None if b is None else b.data_ptr(), y.data_ptr(), 1 if threads > 1 else 1 << 30,
                                threads, 1 << 20, None)
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("threads", [1, 2])
def test_every_distance_gives_the_same_bits(dtype: torch.dtype, threads: int) -> None:
    kind = _kind(dtype)
    g = torch.Generator().manual_seed(kind)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for out_features, in_features in ((37, 29), (300, 576), (1536, 130), (64, 1536)):
            x = torch.randn(1, in_features, generator=g)
            w = torch.randn(out_features, in_features, generator=g).to(dtype)
            b = torch.randn(out_features, generator=g)
            got = []
            for ahead in (*CANDIDATES, 4096):
                assert _lib().kvfence_prefetch_bytes(kind, ahead) == ahead
                got.append(_product(x, w, b, threads))
            assert all(torch.equal(got[0], other) for other in got[1:]), (out_features, in_features)
            want = torch.nn.functional.linear(x.double(), w.double(), b.double())
            assert torch.allclose(got[0].double(), want, rtol=1e-5, atol=1e-4)
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_distance_is_chosen_once_every_candidate_had_its_windows(dtype: torch.dtype) -> None:
    kind = _kind(dtype)
    assert _lib().kvfence_prefetch_bytes(kind, CHOOSE) == -1
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 576, generator=g)
    w = torch.randn(256, 576, generator=g).to(dtype)
    products_to_choose = WINDOW * ROUNDS * len(CANDIDATES)
    for _ in range(products_to_choose - 1):
        _product(x, w, None)
    assert _lib().kvfence_prefetch_bytes(kind, ASK) == -1  # one window short: still trying
    _product(x, w, None)
    assert _lib().kvfence_prefetch_bytes(kind, ASK) in CANDIDATES
    # each weight kind chooses its own: float16 products have not run, so it is still trying
    other = WEIGHT_KINDS["float16"]
    assert _lib().kvfence_prefetch_bytes(other, ASK) == -1


def test_batches_of_several_rows_do_not_count() -> None:
    kind = WEIGHT_KINDS["float32"]
    assert _lib().kvfence_prefetch_bytes(kind, CHOOSE) == -1
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 64, generator=g)
    w = torch.randn(32, 64, generator=g)
    for _ in range(WINDOW * ROUNDS * len(CANDIDATES) + 1):
        _product(x, w, None)
    assert _lib().kvfence_prefetch_bytes(kind, ASK) == -1


@pytest.mark.parametrize(("value", "want"), [("0", 0), ("2048", 2048), ("", -1), ("lots", -1), ("-5", -1)])
def test_the_environment_fixes_the_distance(value: str, want: int) -> None:
    code = (
        "from kvfence.engine.kernels.library import cpu_kernels\n"
        "lib = cpu_kernels()\n"
        "print([lib.kvfence_prefetch_bytes(k, -2) for k in range(3)])\n"
    )
    env = {**os.environ, "KVFENCE_PREFETCH_BYTES": value}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == str([want] * 3)
