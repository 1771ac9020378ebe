"""A whole decode step in one kernel call (``DecodeStepKernel``) equals the per-layer path bit for bit
(hidden states and the pool it writes), for GQA, windows, per-layer views, q/k norms and 2-byte pools;
writes nothing for a slot outside the pool; and is what the engine runs for decode-only steps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.kernels import DecoderLayerKernel, use_gemv_kernel
from kvfence.engine.kernels.decode_step import DecodeStepKernel
from kvfence.engine.layers.attention import AttentionMetadata, paged_attention
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.kernel_marks import needs_kernels
from tests.engine.tiny_models import build_tiny_model, hf_greedy

pytestmark = needs_kernels


@pytest.fixture(autouse=True)
def products_on_the_kernel() -> Iterator[None]:
    use_gemv_kernel(True)
    yield
    use_gemv_kernel(True)


def _layer(g: torch.Generator, hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, *,
           head_norms: bool, weight_dtype: torch.dtype) -> DecoderLayerKernel:
    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * (0.3 if len(shape) == 1 else shape[1] ** -0.5)

    def matrix(*shape: int) -> torch.Tensor:
        return randn(*shape).to(weight_dtype)

    norms = (1 + randn(head_dim), 1 + randn(head_dim)) if head_norms else None
    kernel = DecoderLayerKernel.build(
        input_norm=1 + randn(hidden), post_norm=1 + randn(hidden), eps=1e-6,
        qkv=(matrix((heads + 2 * kv_heads) * head_dim, hidden), randn((heads + 2 * kv_heads) * head_dim)),
        o=(matrix(hidden, heads * head_dim), None), gate_up=(matrix(2 * inter, hidden), None),
        down=(matrix(hidden, inter), None), num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        head_norms=norms,
    )
    assert kernel is not None
    return kernel


def _metadata(rows: int, length: int, window: int | None, num_slots: int,
              g: torch.Generator) -> tuple[AttentionMetadata, AttentionMetadata]:
    """``rows`` decoding sequences whose contexts are scattered over the pool (lengths up to
    ``length``, padded with the null slot 0); the last position of each is the slot written now.
    Returned twice: with the last ``window`` positions visible, and with all of them."""
    lengths = torch.randint(1, length + 1, (rows,), generator=g).tolist()
    lengths[0] = length
    order = torch.randperm(num_slots - 1, generator=g) + 1  # slot 0: the null slot, never anyone's
    slots = torch.zeros(rows, length, dtype=torch.long)
    windowed = torch.zeros(rows, 1, 1, length, dtype=torch.bool)
    full = torch.zeros(rows, 1, 1, length, dtype=torch.bool)
    used = 0
    for b, n in enumerate(lengths):
        slots[b, :n] = order[used : used + n]
        used += n
        windowed[b, 0, 0, 0 if window is None else max(0, n - window) : n] = True
        full[b, 0, 0, :n] = True
    mapping = torch.tensor([int(slots[b, n - 1]) for b, n in enumerate(lengths)])
    return tuple(  # type: ignore[return-value]
        AttentionMetadata(slot_mapping=mapping, num_decode_tokens=rows, decode_slots=slots, decode_mask=mask)
        for mask in (windowed, full)
    )


def _per_layer(layers: list[DecoderLayerKernel], x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               caches: list[tuple[torch.Tensor, torch.Tensor]], meta: AttentionMetadata) -> torch.Tensor:
    """What ``LlamaDecoderLayer.forward_fused`` runs, layer by layer."""
    for i, (kernel, (k_cache, v_cache)) in enumerate(zip(layers, caches, strict=True)):
        h, kv, d = kernel.num_heads, kernel.num_kv_heads, kernel.head_dim
        qkv = kernel.pre(x, cos, sin)
        layer_meta = meta.layer_overrides.get(i, meta)
        attn = paged_attention(qkv[:, :h], qkv[:, h : h + kv], qkv[:, h + kv :], k_cache, v_cache, layer_meta, d**-0.5)
        x = kernel.post(attn.reshape(x.shape[0], h * d), x)
    return x


CASES = [  # hidden, heads, kv_heads, head_dim, inter, head_norms, weights, pool, window, overridden layers
    (64, 4, 2, 16, 96, False, torch.float32, torch.float32, None, ()),  # Llama-like GQA, float32 pool
    (64, 4, 1, 16, 96, False, torch.float32, torch.float32, 5, ()),  # Mistral-like: one KV head, a window
    (40, 5, 5, 8, 37, False, torch.float32, torch.float32, None, ()),  # MHA, odd sizes
    (40, 5, 1, 12, 37, False, torch.float32, torch.float32, 7, ()),  # head_dim 12: the scalar attention path
    (64, 4, 2, 32, 96, True, torch.float32, torch.bfloat16, None, ()),  # Qwen3-like q/k norms, bf16 pool
    (64, 4, 2, 16, 96, False, torch.bfloat16, torch.float16, 6, (0, 2)),  # bf16 weights, f16 pool, full layers
    (576, 9, 3, 64, 1536, False, torch.bfloat16, torch.float16, None, ()),  # SmolLM-135M: shared products
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("threads", [1, 2])
def test_one_call_equals_the_per_layer_path(case: tuple[Any, ...], rows: int, threads: int) -> None:
    hidden, heads, kv_heads, head_dim, inter, head_norms, weights, pool, window, overridden = case
    g = torch.Generator().manual_seed(rows * 7 + threads)
    num_layers, num_slots, length = 3, 400, 40
    layers = [_layer(g, hidden, heads, kv_heads, head_dim, inter, head_norms=head_norms, weight_dtype=weights)
              for _ in range(num_layers)]
    caches = [(torch.randn(num_slots, kv_heads, head_dim, generator=g).to(pool),
               torch.randn(num_slots, kv_heads, head_dim, generator=g).to(pool)) for _ in range(num_layers)]
    meta, full = _metadata(rows, length, window, num_slots, g)
    if overridden:  # full-attention layers of a windowed model: the same slots, no window
        meta.layer_overrides = dict.fromkeys(overridden, full)
    x = torch.randn(rows, hidden + 4, generator=g)[:, 2 : 2 + hidden]  # a strided view
    angles = torch.rand(rows, 1, head_dim // 2, generator=g) * 6.0
    cos, sin = angles.cos(), angles.sin()
    step = DecodeStepKernel.build(layers, caches, [head_dim**-0.5] * num_layers)
    assert step is not None
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert step.takes(x, meta)
        before = [(k.clone(), v.clone()) for k, v in caches]
        want = _per_layer(layers, x, cos, sin, caches, meta)
        want_pools = [(k.clone(), v.clone()) for k, v in caches]
        for (k, v), (k0, v0) in zip(caches, before, strict=True):
            k.copy_(k0)
            v.copy_(v0)
        got = step.run(x, cos, sin, meta)
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(got, want)
    for (k, v), (wk, wv), (k0, _) in zip(caches, want_pools, before, strict=True):
        assert torch.equal(k.view(torch.int16 if k.element_size() == 2 else torch.int32),
                           wk.view(torch.int16 if wk.element_size() == 2 else torch.int32))
        assert torch.equal(v, wv)
        assert not torch.equal(k, k0)  # the step's K rows were written


def test_a_slot_outside_the_pool_writes_nothing() -> None:
    g = torch.Generator().manual_seed(1)
    layers = [_layer(g, 64, 4, 2, 16, 96, head_norms=False, weight_dtype=torch.float32) for _ in range(2)]
    caches = [(torch.randn(100, 2, 16, generator=g), torch.randn(100, 2, 16, generator=g)) for _ in range(2)]
    caches[1] = (torch.randn(50, 2, 16, generator=g), torch.randn(50, 2, 16, generator=g))  # a smaller pool
    meta, _ = _metadata(2, 10, None, 50, g)
    meta.slot_mapping = torch.tensor([3, 70])  # inside layer 0's pool, outside layer 1's
    step = DecodeStepKernel.build(layers, caches, [0.25, 0.25])
    assert step is not None
    before = [(k.clone(), v.clone()) for k, v in caches]
    x = torch.randn(2, 64, generator=g)
    angles = torch.rand(2, 1, 8, generator=g)
    with pytest.raises(IndexError, match="outside the pool"):
        step.run(x, angles.cos(), angles.sin(), meta)
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(caches, before, strict=True))


def test_build_refuses_pools_the_kernel_cannot_read() -> None:
    g = torch.Generator().manual_seed(2)
    layer = _layer(g, 64, 4, 2, 16, 96, head_norms=False, weight_dtype=torch.float32)
    good = (torch.zeros(20, 2, 16), torch.zeros(20, 2, 16))
    assert DecodeStepKernel.build([layer], [good], [0.25]) is not None
    assert DecodeStepKernel.build([layer], [(torch.zeros(20, 4, 8), torch.zeros(20, 4, 8))], [0.25]) is None
    assert DecodeStepKernel.build([layer], [(torch.zeros(20, 2, 16).double(),) * 2], [0.25]) is None
    assert DecodeStepKernel.build([layer], [(good[0], good[1].half())], [0.25]) is None
    assert DecodeStepKernel.build([layer], [(torch.zeros(20, 16, 2).transpose(1, 2),) * 2], [0.25]) is None
    odd = _layer(g, 40, 5, 1, 12, 37, head_norms=False, weight_dtype=torch.float32)
    assert DecodeStepKernel.build([odd], [(torch.zeros(9, 1, 12).bfloat16(),) * 2], [0.3]) is None  # 2-byte: D % 8
    assert DecodeStepKernel.build([odd], [(torch.zeros(9, 1, 12),) * 2], [0.3]) is not None


def test_takes_only_decode_only_steps() -> None:
    g = torch.Generator().manual_seed(3)
    layer = _layer(g, 64, 4, 2, 16, 96, head_norms=False, weight_dtype=torch.float32)
    step = DecodeStepKernel.build([layer], [(torch.zeros(60, 2, 16), torch.zeros(60, 2, 16))], [0.25])
    assert step is not None
    meta, _ = _metadata(3, 8, None, 60, g)
    x = torch.randn(3, 64)
    assert step.takes(x, meta)
    assert not step.takes(torch.randn(4, 64), meta)  # a token that is not a decode row
    mixed = AttentionMetadata(slot_mapping=torch.arange(4), num_decode_tokens=3, decode_slots=meta.decode_slots)
    assert not step.takes(torch.randn(4, 64), mixed)
    assert not step.takes(x, AttentionMetadata(slot_mapping=meta.slot_mapping, num_decode_tokens=3))
    assert not step.takes(x, AttentionMetadata(slot_mapping=meta.slot_mapping.int(), num_decode_tokens=3,
                                               decode_slots=meta.decode_slots))


# ---- in the engine ------------------------------------------------------------------------------

FAMILIES = [  # arch, overrides of the tiny model, the engine's KV pool
    ("llama", {}, "auto"),
    ("mistral", {"sliding_window": 8}, "auto"),  # one KV head, a window shorter than the context
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}, "auto"),  # full + windowed
    ("qwen3", {}, "auto"),  # q/k norms
    ("phi3", {}, "bfloat16"),
]


@pytest.mark.parametrize(("arch", "overrides", "kv_cache_dtype"), FAMILIES)
def test_the_engine_decodes_through_one_call_and_matches_the_per_layer_path(
    arch: str, overrides: dict[str, Any], kv_cache_dtype: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = build_tiny_model(tmp_path / arch, arch, **overrides)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 23, 9)]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=2)
    runs = {"step": 0}
    real_run = DecodeStepKernel.run

    def counted(self: DecodeStepKernel, *args: Any) -> torch.Tensor:
        runs["step"] += 1
        return real_run(self, *args)

    monkeypatch.setattr(DecodeStepKernel, "run", counted)

    def generate() -> list[Any]:
        llm = LLM(model=str(model_dir), kv_cache_tokens=1024, page_size=8, device="cpu",
                  kv_cache_dtype=kv_cache_dtype)  # type: ignore[arg-type]
        use_gemv_kernel(True)  # whatever the engine's calibration chose on this machine
        return llm.generate(prompts, params)

    fused = generate()
    assert runs["step"] > 0
    monkeypatch.setattr(DecodeStepKernel, "takes", lambda self, x, meta: False)
    runs["step"] = 0
    per_layer = generate()
    assert runs["step"] == 0
    assert [o.token_ids for o in fused] == [o.token_ids for o in per_layer]
    assert [o.logprobs for o in fused] == [o.logprobs for o in per_layer]  # the same bits
    if arch in ("llama", "qwen3"):  # float32 pools: greedy parity with transformers
        assert [o.token_ids for o in fused] == hf_greedy(model_dir, prompts, 12)
