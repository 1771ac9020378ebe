"""Half-precision weights on the CPU (``kernels.half_weights``): stored in 2 bytes, computed in float32.

The products read bfloat16 / float16 weights as stored and widen each to float32 as it is loaded,
so a model run with ``dtype="bfloat16"`` is the float32 model run on weights rounded to bfloat16:
against a float32 engine over a checkpoint already rounded to bfloat16 it must give the same
tokens and, product for product, the same sums.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kvfence.engine.kernels import (
    MAX_KERNEL_ROWS,
    gemv_kernel_in_use,
    kernel_status,
    linear,
    tiled_kernel_in_use,
    use_gemv_kernel,
)
from kvfence.engine.kernels.fused_layer import DecoderLayerKernel
from kvfence.engine.llm import LLM
from kvfence.engine.models.llama import FusedLinear, LlamaDecoderLayer
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.tiny_models import build_tiny_model

HALF = (torch.bfloat16, torch.float16)
needs_kernels = pytest.mark.skipif(not kernel_status().enabled, reason="CPU kernels not in use here")


@needs_kernels
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("rows", [1, 2, 3, 7, 13, 32, MAX_KERNEL_ROWS])
@pytest.mark.parametrize("threads", [1, 2])
def test_half_weight_products_sum_in_float32(dtype: torch.dtype, rows: int, threads: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 300 + 5, generator=gen)[:, :300]  # strided rows, an inner size not a multiple of 8
    weight = torch.randn(1037, 300, generator=gen).to(dtype)  # > MIN_PARALLEL_WEIGHTS: shared over threads
    bias = torch.randn(1037, generator=gen)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = linear(x, weight, bias)
    finally:
        torch.set_num_threads(saved)
    want = F.linear(x.double(), weight.double(), bias.double())
    assert got.dtype == torch.float32
    # float32 sums of exactly widened weights: float32 rounding, not half precision's (2^-8 relative)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=2e-4), (got.double() - want).abs().max()


@needs_kernels
def test_half_weights_match_float32_weights_bit_for_bit() -> None:
    # the same values stored in 2 or 4 bytes: the same FMAs in the same order (from 2 rows; one row
    # sums 64 weights per step over eight accumulators, float32 32 over four)
    # (an engine built earlier in the process may have chosen torch's float32 products by timing)
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(700, 192, generator=gen).to(torch.bfloat16)
    saved = (gemv_kernel_in_use(), tiled_kernel_in_use())
    use_gemv_kernel(True)
    try:
        for rows in (2, 5, 40):
            x = torch.randn(rows, 192, generator=gen)
            assert torch.equal(linear(x, weight), linear(x, weight.float())), rows
    finally:
        use_gemv_kernel(saved[0], tiled=saved[1])


def test_products_the_kernel_does_not_take_still_sum_in_float32() -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(MAX_KERNEL_ROWS + 5, 64, generator=gen)  # a prefill-sized batch: torch's product
    weight = torch.randn(48, 64, generator=gen).to(torch.bfloat16)
    got = linear(x, weight)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), F.linear(x.double(), weight.double()), rtol=1e-5, atol=1e-4)


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("half") / "qwen2", "qwen2", dtype=torch.bfloat16)


def _llm(model_dir: Path, dtype: str, **kwargs: object) -> LLM:
    return LLM(model=str(model_dir), kv_cache_tokens=2048, max_model_len="auto", page_size=8, dtype=dtype,  # type: ignore[arg-type]
               device="cpu", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cpu_half_model_stores_matrices_in_half_and_computes_in_float32(bf16_checkpoint: Path, dtype: str) -> None:
    model = _llm(bf16_checkpoint, dtype).engine.runner.model
    half = torch.bfloat16 if dtype == "bfloat16" else torch.float16
    products = [m for m in model.modules() if isinstance(m, FusedLinear)]
    assert products and all(m.weight.dtype == half for m in products)
    assert model.model.embed_tokens.weight.dtype == half
    norms = [p for name, p in model.named_parameters() if "norm" in name]
    assert norms and all(p.dtype == torch.float32 for p in norms)
    if kernel_status().enabled:  # the decode step runs the fused float32 layers over the half weights
        layer = model.model.layers[0]
        assert isinstance(layer, LlamaDecoderLayer)
        assert isinstance(layer.fused_kernel(), DecoderLayerKernel)


def test_bfloat16_model_is_the_float32_model_on_rounded_weights(bf16_checkpoint: Path) -> None:
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (3, 17, 40)]
    params = SamplingParams(max_tokens=16, temperature=0, logprobs=0, ignore_eos=True)
    # the checkpoint is bfloat16 already: a float32 engine holds exactly the same values in 4 bytes
    reference = _llm(bf16_checkpoint, "float32").generate(prompts, params)
    half = _llm(bf16_checkpoint, "bfloat16", kv_cache_dtype="float32").generate(prompts, params)
    for ref, out in zip(reference, half, strict=True):
        assert out.token_ids == ref.token_ids
        assert out.logprobs is not None and ref.logprobs is not None
        ours = torch.tensor([e[t] for t, e in zip(out.token_ids, out.logprobs, strict=True)])
        theirs = torch.tensor([e[t] for t, e in zip(ref.token_ids, ref.logprobs, strict=True)])
        # equal where the same product forms run; float32 rounding where calibration chose torch's
        assert (ours - theirs).abs().max().item() < 1e-4
