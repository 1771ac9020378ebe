"""A decoder layer's fused halves (``DecoderLayerKernel``) equal the per-op path and torch, and step
aside wherever the per-op path must run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kvfence.engine.kernels import (
    MAX_KERNEL_ROWS,
    TILED_MIN_ROWS,
    DecoderLayerKernel,
    linear,
    reset_kernels,
    rms_norm,
    silu_mul,
    try_rope_,
    use_gemv_kernel,
)
from kvfence.engine.llm import LLM
from kvfence.engine.models import llama
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.kernel_marks import needs_kernels
from tests.engine.tiny_models import build_tiny_model, hf_greedy

Weights = dict[str, torch.Tensor | None]


@pytest.fixture(autouse=True)
def products_on_the_kernel() -> Iterator[None]:
    """Products go to the kernel here whatever an engine's calibration chose before."""
    use_gemv_kernel(True)
    yield
    use_gemv_kernel(True)


def _layer(
    hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, *, qkv_bias: bool, o_bias: bool,
    mlp_bias: bool, seed: int = 0,
) -> Weights:
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:  # a matrix scaled by 1/sqrt(fan-in), as trained ones roughly are
        return torch.randn(*shape, generator=g) * (0.3 if len(shape) == 1 else shape[1] ** -0.5)

    width = (heads + 2 * kv_heads) * head_dim
    return {
        "input_norm": 1 + randn(hidden),
        "post_norm": 1 + randn(hidden),
        "qkv": randn(width, hidden),
        "qkv_bias": randn(width) if qkv_bias else None,
        "o": randn(hidden, heads * head_dim),
        "o_bias": randn(hidden) if o_bias else None,
        "gate_up": randn(2 * inter, hidden),
        "gate_up_bias": randn(2 * inter) if mlp_bias else None,
        "down": randn(hidden, inter),
        "down_bias": randn(hidden) if mlp_bias else None,
    }


def _build(w: Weights, heads: int, kv_heads: int, head_dim: int, eps: float = 1e-5) -> DecoderLayerKernel | None:
    def t(name: str) -> torch.Tensor:
        value = w[name]
        assert value is not None
        return value

    return DecoderLayerKernel.build(
        input_norm=t("input_norm"), post_norm=t("post_norm"), eps=eps,
        qkv=(t("qkv"), w["qkv_bias"]), o=(t("o"), w["o_bias"]),
        gate_up=(t("gate_up"), w["gate_up_bias"]), down=(t("down"), w["down_bias"]),
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
    )


def _rope_tables(rows: int, head_dim: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    angles = torch.rand(rows, 1, head_dim // 2, generator=g) * 6.0
    return angles.cos(), angles.sin()


def _per_op(w: Weights, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int,
            head_dim: int, attn: torch.Tensor, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-op path of llama.py (the separate kernels where they apply)."""
    assert w["input_norm"] is not None and w["post_norm"] is not None
    assert w["qkv"] is not None and w["o"] is not None and w["gate_up"] is not None and w["down"] is not None
    qkv = linear(rms_norm(x, w["input_norm"], eps), w["qkv"], w["qkv_bias"]).view(x.shape[0], -1, head_dim)
    if not try_rope_(qkv, heads + kv_heads, cos, sin):
        rotated = qkv[:, : heads + kv_heads]
        x1, x2 = rotated.chunk(2, dim=-1)
        rotated.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))
    h = x + linear(attn, w["o"], w["o_bias"])
    out = h + linear(silu_mul(linear(rms_norm(h, w["post_norm"], eps), w["gate_up"], w["gate_up_bias"])), w["down"],
                     w["down_bias"])
    return qkv, out


def _reference(w: Weights, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int,
               head_dim: int, attn: torch.Tensor, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain torch in float64."""
    d = {k: None if v is None else v.double() for k, v in w.items()}
    assert d["input_norm"] is not None and d["post_norm"] is not None
    assert d["qkv"] is not None and d["o"] is not None and d["gate_up"] is not None and d["down"] is not None
    xd, c, s = x.double(), cos.double(), sin.double()
    qkv = F.linear(F.rms_norm(xd, d["input_norm"].shape, d["input_norm"], eps), d["qkv"], d["qkv_bias"])
    qkv = qkv.view(x.shape[0], -1, head_dim).clone()
    x1, x2 = qkv[:, : heads + kv_heads].chunk(2, dim=-1)
    qkv[:, : heads + kv_heads] = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    h = xd + F.linear(attn.double(), d["o"], d["o_bias"])
    gate, up = F.linear(F.rms_norm(h, d["post_norm"].shape, d["post_norm"], eps), d["gate_up"], d["gate_up_bias"]).chunk(2, -1)
    return qkv, h + F.linear(F.silu(gate) * up, d["down"], d["down_bias"])


SHAPES = [  # hidden, heads, kv_heads, head_dim, inter, qkv_bias, o_bias, mlp_bias
    (64, 4, 2, 16, 96, False, False, False),  # Llama-like, GQA
    (40, 5, 1, 8, 37, True, False, False),  # Qwen2-like q/k/v bias, odd intermediate size
    (72, 3, 3, 24, 130, True, True, True),  # every bias, MHA
    (576, 9, 3, 64, 1536, False, False, False),  # SmolLM-135M: products shared over threads
]


@needs_kernels
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 17, 64, 65, MAX_KERNEL_ROWS])
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_halves_equal_the_per_op_path_and_torch(
    shape: tuple[int, int, int, int, int, bool, bool, bool], rows: int, threads: int
) -> None:
    hidden, heads, kv_heads, head_dim, inter, qkv_bias, o_bias, mlp_bias = shape
    w = _layer(hidden, heads, kv_heads, head_dim, inter, qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias)
    kernel = _build(w, heads, kv_heads, head_dim)
    assert kernel is not None
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, hidden + 5, generator=g)[:, 3 : 3 + hidden]  # a strided view, as a residual slice may be
    attn = torch.randn(rows, heads * head_dim, generator=g)
    cos, sin = _rope_tables(rows, head_dim)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert kernel.takes(x, cos, sin)
        qkv, out = kernel.pre(x, cos, sin), kernel.post(attn, x)
        want_qkv, want_out = _reference(w, x, cos, sin, heads, kv_heads, head_dim, attn)
        torch.testing.assert_close(qkv.double(), want_qkv, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out.double(), want_out, rtol=1e-4, atol=1e-4)
        # the per-op path runs the same kernels: bit for bit
        per_op_qkv, per_op_out = _per_op(w, x, cos, sin, heads, kv_heads, head_dim, attn)
        assert torch.equal(qkv, per_op_qkv)
        assert torch.equal(out, per_op_out)
    finally:
        torch.set_num_threads(saved)


@needs_kernels
def test_post_reads_a_strided_attention_output_and_checks_its_shape() -> None:
    w = _layer(40, 5, 1, 8, 37, qkv_bias=True, o_bias=True, mlp_bias=False)
    kernel = _build(w, 5, 1, 8)
    assert kernel is not None
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 40, generator=g)
    wide = torch.randn(3, 60, generator=g)
    attn = wide[:, 10:50]
    assert torch.equal(kernel.post(attn, x), kernel.post(attn.contiguous(), x))
    with pytest.raises(ValueError, match="attention output"):
        kernel.post(torch.randn(3, 41), x)


@needs_kernels
def test_takes_only_what_the_kernel_can_run() -> None:
    w = _layer(64, 4, 2, 16, 96, qkv_bias=False, o_bias=False, mlp_bias=False)
    kernel = _build(w, 4, 2, 16)
    assert kernel is not None
    cos, sin = _rope_tables(4, 16)
    x = torch.randn(4, 64)
    assert kernel.takes(x, cos, sin)
    assert not kernel.takes(x.double(), cos, sin)
    assert not kernel.takes(x.half(), cos, sin)
    assert not kernel.takes(x[:, :32], cos[:, :, :8], sin[:, :, :8])  # another hidden size
    assert not kernel.takes(x.t().contiguous().t(), cos, sin)  # columns not contiguous
    assert not kernel.takes(x, cos.double(), sin.double())
    assert not kernel.takes(x, cos[:2], sin[:2])  # tables for other tokens
    big = torch.randn(MAX_KERNEL_ROWS + 1, 64)
    big_cos, big_sin = _rope_tables(MAX_KERNEL_ROWS + 1, 16)
    assert not kernel.takes(big, big_cos, big_sin)  # prefill-sized: torch's sgemm
    with torch.enable_grad():
        assert not kernel.takes(x.clone().requires_grad_(), cos, sin)
    use_gemv_kernel(False, tiled=True)  # the calibration gave products below TILED_MIN_ROWS rows to torch
    few = torch.randn(TILED_MIN_ROWS - 1, 64)
    few_cos, few_sin = _rope_tables(TILED_MIN_ROWS - 1, 16)
    assert not kernel.takes(few, few_cos, few_sin)
    assert kernel.takes(x, cos, sin)  # 4 rows: the tiled form
    five = torch.randn(5, 64)
    five_cos, five_sin = _rope_tables(5, 16)
    assert kernel.takes(five, five_cos, five_sin)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_weights_take_every_batch_whatever_a_float32_calibration_chose(dtype: torch.dtype) -> None:
    """Half weights always run the kernel's products (``linear`` has no torch form for them), so a
    float32 model's calibration giving products to torch must not take a half model's decode off the
    fused path (it did when a float32 engine had been built first in the same process)."""
    w = _layer(64, 4, 2, 16, 96, qkv_bias=False, o_bias=False, mlp_bias=False)
    half = {k: None if v is None or v.dim() != 2 else v.to(dtype) for k, v in w.items()}
    half.update({k: w[k] for k in ("input_norm", "post_norm")})
    kernel = _build(half, 4, 2, 16)
    assert kernel is not None
    use_gemv_kernel(False, tiled=False)  # a float32 calibration gave every product form to torch
    for rows in (1, 2, 5, MAX_KERNEL_ROWS):
        cos, sin = _rope_tables(rows, 16)
        assert kernel.takes(torch.randn(rows, 64), cos, sin)
    big_cos, big_sin = _rope_tables(MAX_KERNEL_ROWS + 1, 16)
    assert not kernel.takes(torch.randn(MAX_KERNEL_ROWS + 1, 64), big_cos, big_sin)
    float_kernel = _build(w, 4, 2, 16)
    assert float_kernel is not None
    cos, sin = _rope_tables(1, 16)
    assert not float_kernel.takes(torch.randn(1, 64), cos, sin)  # float32 weights follow the calibration


def test_build_refuses_what_the_kernel_cannot_read() -> None:
    w = _layer(64, 4, 2, 16, 96, qkv_bias=False, o_bias=False, mlp_bias=False)
    wrong_heads = DecoderLayerKernel.build(
        input_norm=w["input_norm"], post_norm=w["post_norm"], eps=1e-5,  # type: ignore[arg-type]
        qkv=(w["qkv"], None), o=(w["o"], None), gate_up=(w["gate_up"], None), down=(w["down"], None),  # type: ignore[arg-type]
        num_heads=5, num_kv_heads=2, head_dim=16,
    )
    assert wrong_heads is None
    half = {k: None if v is None else v.half() for k, v in w.items()}
    assert _build(half, 4, 2, 16) is None
    transposed = dict(w)
    gate_up = w["gate_up"]
    assert gate_up is not None
    transposed["gate_up"] = gate_up.t().contiguous().t()
    assert _build(transposed, 4, 2, 16) is None
    assert _build(w, 4, 2, 15) is None  # odd head_dim: no rotate-half RoPE




def test_no_block_when_the_kernels_are_off(fresh_kernels: pytest.MonkeyPatch) -> None:
    fresh_kernels.setenv("KVFENCE_CPU_KERNELS", "0")
    reset_kernels()
    w = _layer(64, 4, 2, 16, 96, qkv_bias=False, o_bias=False, mlp_bias=False)
    assert _build(w, 4, 2, 16) is None


@needs_kernels
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_engine_runs_the_fused_layers_and_matches_transformers(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = build_tiny_model(tmp_path / arch, arch)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 23, 9)]
    reference = hf_greedy(model_dir, prompts, 10)
    calls = {"pre": 0, "post": 0}
    real_pre, real_post = DecoderLayerKernel.pre, DecoderLayerKernel.post

    def pre(self: DecoderLayerKernel, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        calls["pre"] += 1
        return real_pre(self, x, cos, sin)

    def post(self: DecoderLayerKernel, attn: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        calls["post"] += 1
        return real_post(self, attn, x)

    monkeypatch.setattr(DecoderLayerKernel, "pre", pre)
    monkeypatch.setattr(DecoderLayerKernel, "post", post)
    llm = LLM(model=str(model_dir), kv_cache_tokens=1024, page_size=8, device="cpu")
    use_gemv_kernel(True)  # whatever the engine's calibration chose on this machine
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    assert [o.token_ids for o in llm.generate(prompts, params)] == reference
    layers = sum(isinstance(m, llama.LlamaDecoderLayer) for m in llm.engine.runner.model.modules())
    assert calls["pre"] == calls["post"] > 0
    assert calls["pre"] % layers == 0


@needs_kernels
def test_a_layer_rebuilds_its_block_when_its_weights_move() -> None:
    from kvfence.engine.config import ModelConfig

    cfg = ModelConfig.from_dict({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 50, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
    })
    layer = llama.LlamaDecoderLayer(cfg, torch.float32, torch.device("cpu"))
    for p in layer.parameters():
        p.data.normal_()
    first = layer.fused_kernel()
    assert first is not None and layer.fused_kernel() is first
    layer.mlp.down_proj.weight.data = layer.mlp.down_proj.weight.data.clone()
    second = layer.fused_kernel()
    assert second is not None and second is not first
    layer.to(torch.float64)  # another dtype: no block
    assert layer.fused_kernel() is None
    layer.to(torch.float32)
    third = layer.fused_kernel()
    assert third is not None and third is not second
    layer.mlp.down_proj.weight = torch.nn.Parameter(layer.mlp.down_proj.weight.detach().clone(), requires_grad=False)
    layer.drop_fused_kernel()
    assert layer.fused_kernel() is not third
