"""The CPU decode kernels equal torch (within fp32 rounding; RoPE bit for bit) and fall back cleanly."""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kvfence.engine.kernels import (
    MAX_KERNEL_ROWS,
    TILED_MIN_ROWS,
    LinearCalibration,
    calibrate_linear,
    gemv_kernel_in_use,
    kernel_status,
    linear,
    ops,
    reset_kernels,
    rms_norm,
    silu_mul,
    tiled_kernel_in_use,
    tiled_kernel_max_rows,
    try_rope_,
    use_gemv_kernel,
)
from kvfence.engine.kernels.ops import (
    CALIBRATION_ROWS,
    GEMV_TORCH_MARGIN,
    TILED_TORCH_MARGIN,
    keeps_kernel,
    kernel_runs_products,
)
from kvfence.engine.layers.rotary import RotaryEmbedding
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.kernel_marks import needs_kernels
from tests.engine.tiny_models import build_tiny_model, hf_greedy


@pytest.fixture(autouse=True)
def gemv_kernel_on() -> Iterator[None]:
    """Products go to the kernel here whatever an engine's calibration chose before."""
    use_gemv_kernel(True)
    yield
    use_gemv_kernel(True)




def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---- equality with torch -------------------------------------------------------------------------


@needs_kernels
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 24, 63, 64, 65, 71, MAX_KERNEL_ROWS])
@pytest.mark.parametrize(("out_features", "in_features"), [(1, 1), (3, 7), (5, 9), (17, 33), (64, 576), (101, 1536)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_equals_f_linear_on_odd_shapes(rows: int, out_features: int, in_features: int, with_bias: bool) -> None:
    g = _gen(rows * 1000 + out_features)
    x = torch.randn(rows, in_features, generator=g)
    w = torch.randn(out_features, in_features, generator=g)
    b = torch.randn(out_features, generator=g) if with_bias else None
    with torch.inference_mode():
        got = linear(x, w, b)
    want = F.linear(x.double(), w.double(), None if b is None else b.double())
    # fp32 sums of in_features products: error grows with the length and the magnitude of the terms
    tol = 4 * torch.finfo(torch.float32).eps * (x.abs().double() @ w.abs().double().T + 1)
    assert got.dtype == torch.float32 and got.shape == (rows, out_features)
    assert bool(((got.double() - want).abs() <= tol).all())
    assert torch.allclose(got, F.linear(x, w, b), rtol=1e-4, atol=1e-4)


@needs_kernels
def test_linear_reads_strided_input_and_large_products_use_threads() -> None:
    g = _gen(1)
    base = torch.randn(3, 600, generator=g)
    x = base[:, 5:581]  # rows with a stride larger than their length
    w = torch.randn(2000, 576, generator=g)  # big enough to be split over threads
    with torch.inference_mode():
        assert torch.allclose(linear(x, w), F.linear(x, w), rtol=1e-4, atol=1e-4)
        col = torch.randn(576, 2, generator=g)[:, 0].unsqueeze(0)  # a column view: copied, not misread
        assert torch.allclose(linear(col, w), F.linear(col, w), rtol=1e-4, atol=1e-4)


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_linear_shares_rows_over_threads_correctly(threads: int) -> None:
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = _gen(threads)
        with torch.inference_mode():
            for i in range(40):  # back-to-back products, as in a decode step
                rows, out_features, in_features = 1 + i % 3, 300 + 97 * i, 64 + 40 * (i % 5)
                x = torch.randn(rows, in_features, generator=g)
                w = torch.randn(out_features, in_features, generator=g)
                b = torch.randn(out_features, generator=g)
                assert torch.allclose(linear(x, w, b), F.linear(x, w, b), rtol=1e-4, atol=1e-4), (i, threads)
    finally:
        torch.set_num_threads(saved)


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_tiled_products_share_rows_over_threads_correctly(threads: int) -> None:
    """Batches of the tiled form: every row count around the register tile (8, 16) and the packed
    block (64), weight rows that are not a whole panel (12), strided input, bias, 1-3 threads."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = _gen(100 + threads)
        with torch.inference_mode():
            for i, rows in enumerate(range(TILED_MIN_ROWS, MAX_KERNEL_ROWS + 1, 7)):
                out_features, in_features = 12 * (5 + 13 * i) + i % 12, 17 + 31 * (i % 7)
                x = torch.randn(rows, in_features + 5, generator=g)[:, 2 : 2 + in_features]
                w = torch.randn(out_features, in_features, generator=g)
                b = torch.randn(out_features, generator=g) if i % 2 else None
                assert torch.allclose(linear(x, w, b), F.linear(x, w, b), rtol=1e-4, atol=1e-4), (rows, threads)
    finally:
        torch.set_num_threads(saved)


@needs_kernels
def test_calibration_keeps_the_faster_of_torch_and_the_kernel_per_form() -> None:
    g = _gen(9)
    weights = [torch.randn(512, 256, generator=g) for _ in range(8)]
    timings = calibrate_linear(weights, repeats=2)
    assert timings is not None
    assert min(timings.torch_gemv_s, timings.kernel_gemv_s, *timings.torch_tiled_s, *timings.kernel_tiled_s) > 0
    assert gemv_kernel_in_use() == keeps_kernel(timings.torch_gemv_s, timings.kernel_gemv_s, margin=GEMV_TORCH_MARGIN)
    # sizes timed in order until torch wins one; the kernel keeps the sizes before it
    assert timings.tiled_rows == CALIBRATION_ROWS[: len(timings.tiled_rows)]
    won = [keeps_kernel(t, k, margin=TILED_TORCH_MARGIN) for k, t in zip(timings.kernel_tiled_s, timings.torch_tiled_s, strict=True)]
    assert all(won[:-1]) and (not won[-1] or len(won) == len(CALIBRATION_ROWS))
    assert tiled_kernel_in_use() == won[0]
    assert tiled_kernel_max_rows() == (max(r for r, w in zip(timings.tiled_rows, won, strict=True) if w) if won[0] else TILED_MIN_ROWS - 1)
    one, batch = torch.randn(1, 256, generator=g), torch.randn(TILED_MIN_ROWS + 3, 256, generator=g)
    use_gemv_kernel(False, tiled=True)  # torch chosen for one row: exactly F.linear there only
    assert torch.equal(linear(one, weights[0]), F.linear(one, weights[0]))
    use_gemv_kernel(True, tiled=False)  # and for batches
    assert torch.equal(linear(batch, weights[0]), F.linear(batch, weights[0]))
    assert calibrate_linear([torch.randn(4, 4, dtype=torch.float64)]) is None  # nothing it applies to


def test_calibration_gives_torch_a_form_only_when_it_is_clearly_faster() -> None:
    """A timing a little in torch's favour (noise on a loaded machine) keeps the kernel, and with it
    the fused decode path; torch wins only by a clear margin."""
    assert keeps_kernel(torch_s=1.0, kernel_s=1.0)
    assert keeps_kernel(torch_s=0.9, kernel_s=1.0)  # 10 % faster: not enough
    assert keeps_kernel(torch_s=2.0, kernel_s=1.0)
    assert not keeps_kernel(torch_s=0.5, kernel_s=1.0)  # twice as fast (MKL's sgemm on some CPUs)
    # one-row products (batch-1 decode) go to torch only at under half the kernel's time
    assert keeps_kernel(torch_s=0.7, kernel_s=1.0, margin=GEMV_TORCH_MARGIN)
    assert not keeps_kernel(torch_s=0.4, kernel_s=1.0, margin=GEMV_TORCH_MARGIN)


@needs_kernels
def test_calibration_keeps_the_small_batches_the_kernel_wins_when_torch_wins_larger_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel faster than MKL at 8 and 16 rows, MKL more than twice as fast from 32: batches up to
    16 rows must keep the kernel (a single 32-row timing, as before, gave them all to MKL)."""
    timed: list[int] = []

    def fake_time_forms(weights: list[torch.Tensor], rows: int, repeats: int, gen: torch.Generator) -> tuple[float, float]:
        timed.append(rows)
        kernel_ms = {1: 4.0, 8: 6.0, 16: 7.0}.get(rows, 30.0)
        return 5.0e-3 if rows == 1 else 12.0e-3, kernel_ms * 1e-3  # (torch, kernel)

    monkeypatch.setattr(ops, "_time_forms", fake_time_forms)
    timings = calibrate_linear([torch.randn(64, 32, generator=_gen(3))])
    assert timings is not None
    assert timed == [1, 8, 16, 32]  # stops at the first size torch wins
    assert timings.tiled_rows == (8, 16, 32) and timings.tiled_max_rows == 16
    assert gemv_kernel_in_use() and tiled_kernel_in_use() and tiled_kernel_max_rows() == 16
    assert [kernel_runs_products(r) for r in (1, 2, TILED_MIN_ROWS, 8, 16, 17, 32, MAX_KERNEL_ROWS)] == [
        True, True, True, True, True, False, False, False,
    ]
    g = _gen(4)
    w = torch.randn(40, 24, generator=g)
    big = torch.randn(17, 24, generator=g)
    assert torch.equal(linear(big, w), F.linear(big, w))  # torch's product above the limit
    small = torch.randn(8, 24, generator=g)
    assert torch.allclose(linear(small, w), F.linear(small, w), rtol=1e-5, atol=1e-5)


def test_calibration_limit_is_the_last_size_won_with_every_smaller_one() -> None:
    def limit(kernel_ms: tuple[float, ...]) -> int:
        rows = CALIBRATION_ROWS[: len(kernel_ms)]
        return LinearCalibration(1.0, 1.0, rows, (10.0,) * len(rows), kernel_ms).tiled_max_rows

    assert limit((9.0,) * len(CALIBRATION_ROWS)) == MAX_KERNEL_ROWS
    assert limit((9.0, 9.0, 25.0)) == CALIBRATION_ROWS[1]
    assert limit((19.0,)) == CALIBRATION_ROWS[0]  # torch faster, but not twice: the kernel stays
    assert limit((21.0,)) == TILED_MIN_ROWS - 1  # torch twice as fast
    assert limit((21.0, 9.0)) == TILED_MIN_ROWS - 1  # a later win does not count


@needs_kernels
def test_silu_mul_is_accurate_over_the_whole_float_range() -> None:
    """The vectorised exp clamps its input to [-87, 88]: silu must still equal torch's from -120 to 120,
    in a row length that leaves a scalar tail (1001 = 125 vectors + 1)."""
    gate = torch.linspace(-120, 120, 4 * 1001).view(4, 1001)
    up = torch.randn(4, 1001, generator=_gen(5))
    with torch.inference_mode():
        got = silu_mul(torch.cat([gate, up], dim=1))
    want = F.silu(gate.double()) * up.double()
    assert torch.isfinite(got).all()
    assert torch.allclose(got.double(), want, rtol=2e-6, atol=1e-30)


def test_linear_outside_the_kernel_is_exactly_f_linear() -> None:
    g = _gen(2)
    w = torch.randn(9, 12, generator=g)
    cases = [
        torch.randn(MAX_KERNEL_ROWS + 1, 12, generator=g),  # a prefill-sized batch
        torch.randn(2, 12, generator=g).double(),  # another dtype
        torch.randn(4, 3, 12, generator=g),  # 3-D input
    ]
    for x in cases:
        ww = w.to(x.dtype)
        assert torch.equal(linear(x, ww), F.linear(x, ww))
    wt = torch.randn(12, 9, generator=g).T  # non-contiguous weight
    assert torch.equal(linear(cases[0][:2], wt), F.linear(cases[0][:2], wt))
    meta = torch.empty(1, 12, device="meta")  # not a CPU tensor (as CUDA): torch's op
    assert linear(meta, w.to("meta")).device.type == "meta"
    with pytest.raises(RuntimeError):  # shape errors are torch's
        linear(torch.randn(1, 11), w)


def test_linear_under_autograd_is_torch_and_differentiable() -> None:
    w = torch.randn(5, 8, requires_grad=True)
    linear(torch.randn(1, 8), w).sum().backward()
    assert w.grad is not None


@needs_kernels
@pytest.mark.parametrize("rows", [1, 3, 64, 700])  # 700 x 576: a prefill-sized batch, shared over threads
@pytest.mark.parametrize("dim", [1, 7, 16, 31, 576])
@pytest.mark.parametrize("threads", [1, 2])
def test_rms_norm_and_silu_mul_equal_torch(rows: int, dim: int, threads: int) -> None:
    g = _gen(rows + dim)
    x = torch.randn(rows, dim, generator=g) * 3
    w = torch.randn(dim, generator=g)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            assert torch.allclose(rms_norm(x, w, 1e-5), F.rms_norm(x, (dim,), w, 1e-5), rtol=1e-5, atol=1e-6)
            strided = torch.randn(rows, dim + 4, generator=g)[:, 2 : dim + 2]
            assert torch.allclose(
                rms_norm(strided, w, 1e-6), F.rms_norm(strided, (dim,), w, 1e-6), rtol=1e-5, atol=1e-6
            )
            gate_up = torch.randn(rows, 2 * dim, generator=g) * 4
            gate, up = gate_up.chunk(2, dim=-1)
            assert torch.allclose(silu_mul(gate_up), F.silu(gate) * up, rtol=1e-5, atol=1e-6)
    finally:
        torch.set_num_threads(saved)


@needs_kernels
def test_elementwise_kernels_give_the_same_bits_on_one_thread_and_two() -> None:
    """A prefill-sized batch is split over threads by rows: each row is computed as on one thread."""
    g = _gen(11)
    x = torch.randn(2048, 576, generator=g)
    w = torch.randn(576, generator=g)
    gate_up = torch.randn(2048, 2 * 1536, generator=g)
    rope = RotaryEmbedding(64, 2048, 10000.0, None, 2048, torch.float32, torch.device("cpu"))
    cos, sin = rope.tables(torch.arange(2048))
    qkv = torch.randn(2048, 15, 64, generator=g)
    saved = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.inference_mode():
                rotated = qkv.clone()
                assert try_rope_(rotated, 12, cos, sin)
                results.append((rms_norm(x, w, 1e-5), silu_mul(gate_up), rotated))
    finally:
        torch.set_num_threads(saved)
    for one, two in zip(*results, strict=True):
        assert torch.equal(one, two)


@needs_kernels
@pytest.mark.parametrize(("tokens", "heads", "rotated", "head_dim"), [(1, 15, 12, 64), (5, 4, 3, 16), (3, 7, 7, 22)])
def test_rope_kernel_is_bit_exact_with_torch(tokens: int, heads: int, rotated: int, head_dim: int) -> None:
    rope = RotaryEmbedding(head_dim, 128, 10000.0, None, 128, torch.float32, torch.device("cpu"))
    positions = torch.randint(0, 128, (tokens,), generator=_gen(3))
    cos, sin = rope.tables(positions)
    x = torch.randn(tokens, heads, head_dim, generator=_gen(4))
    want = x.clone()
    want[:, :rotated] = RotaryEmbedding.rotate(want[:, :rotated], cos, sin)
    with torch.inference_mode():
        assert try_rope_(x, rotated, cos, sin)
    assert torch.equal(x, want)  # the unrotated heads (v) untouched, the rotated ones bit for bit


def test_rope_falls_back_for_half_precision_and_is_exact_on_big_batches() -> None:
    rope = RotaryEmbedding(16, 256, 10000.0, None, 256, torch.bfloat16, torch.device("cpu"))
    cos, sin = rope.tables(torch.arange(3))
    x = torch.randn(3, 4, 16).to(torch.bfloat16)
    assert not try_rope_(x, 2, cos, sin)
    big = torch.randn(2000, 4, 16)  # prefill-sized: the kernel (shared over threads) where it is built
    cos32, sin32 = RotaryEmbedding(16, 2048, 10000.0, None, 2048, torch.float32, torch.device("cpu")).tables(
        torch.arange(2000)
    )
    want = big.clone()
    want[:, :2] = RotaryEmbedding.rotate(want[:, :2], cos32, sin32)
    RotaryEmbedding.rotate_(big, 2, cos32, sin32)
    assert torch.equal(big, want)


# ---- the switch and the fallbacks ----------------------------------------------------------------


def test_switched_off_by_env_uses_torch(fresh_kernels: pytest.MonkeyPatch) -> None:
    fresh_kernels.setenv("KVFENCE_CPU_KERNELS", "0")
    status = kernel_status()
    assert not status.enabled and "KVFENCE_CPU_KERNELS" in status.reason
    x, w = torch.randn(1, 40), torch.randn(30, 40)
    assert torch.equal(linear(x, w), F.linear(x, w))
    gate_up = torch.randn(2, 20)
    gate, up = gate_up.chunk(2, dim=-1)
    assert torch.equal(silu_mul(gate_up), F.silu(gate) * up)
    assert not try_rope_(torch.randn(1, 2, 8), 1, torch.randn(1, 1, 4), torch.randn(1, 1, 4))


def test_no_compiler_falls_back_and_says_so_once(
    fresh_kernels: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fresh_kernels.delenv("KVFENCE_CPU_KERNELS", raising=False)
    fresh_kernels.setenv("KVFENCE_KERNEL_DIR", str(tmp_path / "kernels"))
    fresh_kernels.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with caplog.at_level(logging.INFO, logger="kvfence.engine.kernels"):
        x, w = torch.randn(2, 10), torch.randn(3, 10)
        assert torch.equal(linear(x, w), F.linear(x, w))
        assert torch.equal(linear(x, w), F.linear(x, w))
        status = kernel_status()
    assert not status.enabled
    if status.reason.startswith("need"):
        pytest.skip(f"kernels never apply on this machine: {status.reason}")
    assert "compiler" in status.reason
    messages = [r.getMessage() for r in caplog.records if "kernels unavailable" in r.getMessage()]
    assert len(messages) == 1 and "using torch" in messages[0]


def test_failed_build_falls_back_with_the_compiler_error(fresh_kernels: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "g++"
    fake.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "g++ (GCC) 99"; exit 0; fi\n'
                    'echo "decode_f32.cpp:1: error: simulated" >&2; exit 1\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    fresh_kernels.delenv("KVFENCE_CPU_KERNELS", raising=False)
    fresh_kernels.setenv("KVFENCE_KERNEL_DIR", str(tmp_path / "kernels"))
    fresh_kernels.setenv("CXX", str(fake))
    status = kernel_status()
    if status.reason.startswith("need"):
        pytest.skip(f"kernels never apply on this machine: {status.reason}")
    assert not status.enabled
    assert "build failed" in status.reason and "simulated" in status.reason
    assert not list((tmp_path / "kernels").glob("*.so"))  # no half-written library left behind
    x, w = torch.randn(1, 10), torch.randn(3, 10)
    assert torch.equal(linear(x, w), F.linear(x, w))


@needs_kernels
def test_build_is_cached_by_content(fresh_kernels: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fresh_kernels.setenv("KVFENCE_KERNEL_DIR", str(tmp_path))
    first = kernel_status()
    assert first.enabled and first.library is not None and first.library.parent == tmp_path
    built = first.library.stat().st_mtime_ns
    reset_kernels()
    second = kernel_status()
    assert second.library == first.library and second.library.stat().st_mtime_ns == built


# ---- the engine ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_engine_greedy_matches_transformers_with_kernels_on_and_off(
    arch: str, fresh_kernels: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model_dir = build_tiny_model(tmp_path / arch, arch)
    g = _gen(5)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 23)]
    reference = hf_greedy(model_dir, prompts, 12)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    for switch in ("1", "0"):
        fresh_kernels.setenv("KVFENCE_CPU_KERNELS", switch)
        reset_kernels()
        llm = LLM(model=str(model_dir), kv_cache_tokens=1024, page_size=8, device="cpu")
        assert [o.token_ids for o in llm.generate(prompts, params)] == reference, f"KVFENCE_CPU_KERNELS={switch}"
