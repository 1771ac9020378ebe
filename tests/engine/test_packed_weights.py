"""Panel-major weight copies (``packed_weights.py``, ``packed_gemm.h``): their layout, products bit
for bit those of the unpacked tile, and copies that follow their weights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kvfence.engine.kernels import TILED_MIN_ROWS, DecoderLayerKernel, linear, use_gemv_kernel
from kvfence.engine.kernels.packed_weights import (
    PACK_WIDTH,
    PACKED_MAX_ROWS,
    PACKED_MIN_ROWS,
    PackedWeight,
    pack_weight,
)
from kvfence.engine.llm import LLM
from kvfence.engine.models import llama
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.kernel_marks import needs_kernels
from tests.engine.tiny_models import build_tiny_model


@pytest.fixture(autouse=True)
def products_on_the_kernel() -> Iterator[None]:
    use_gemv_kernel(True)
    yield
    use_gemv_kernel(True)


@pytest.mark.parametrize("out_features", [1, 15, 16, 17, 48, 50])
def test_pack_weight_lays_out_panels_with_a_zero_padded_last_one(out_features: int) -> None:
    w = torch.randn(out_features, 7, generator=torch.Generator().manual_seed(out_features))
    packed = pack_weight(w)
    panels = -(-out_features // PACK_WIDTH)
    assert packed.shape == (panels, 7, PACK_WIDTH) and packed.is_contiguous()
    for o in range(panels * PACK_WIDTH):
        want = w[o] if o < out_features else torch.zeros(7)
        assert torch.equal(packed[o // PACK_WIDTH, :, o % PACK_WIDTH], want)


def test_pack_weight_refuses_what_the_kernel_cannot_read() -> None:
    with pytest.raises(ValueError, match="2-D CPU float32"):
        pack_weight(torch.randn(4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="2-D CPU float32"):
        pack_weight(torch.randn(4))


def test_the_row_range_starts_at_the_tiled_form() -> None:
    # the panels must give the broadcast tile's bits, so they may not take a batch the dot form runs
    assert PACKED_MIN_ROWS >= TILED_MIN_ROWS
    assert PACKED_MIN_ROWS <= PACKED_MAX_ROWS


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(960, 576), (37, 29), (1500, 24), (17, 8), (16, 1), (576, 1536)])
def test_products_over_panels_equal_the_unpacked_kernel_bit_for_bit(threads: int, shape: tuple[int, int]) -> None:
    out_features, in_features = shape
    g = torch.Generator().manual_seed(out_features * 31 + in_features)
    w = torch.randn(out_features, in_features, generator=g)
    bias = torch.randn(out_features, generator=g)
    packed = pack_weight(w)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows in range(1, PACKED_MAX_ROWS + 3):
            x = torch.randn(rows, in_features + 3, generator=g)[:, :in_features]  # strided rows
            for b in (None, bias):
                got = linear(x, w, b, packed=packed)
                assert torch.equal(got, linear(x, w, b)), (rows, b is None)
                torch.testing.assert_close(got.double(), torch.nn.functional.linear(
                    x.double(), w.double(), None if b is None else b.double()), rtol=1e-5, atol=1e-4)
    finally:
        torch.set_num_threads(saved)


@needs_kernels
def test_linear_refuses_panels_of_another_weight() -> None:
    w = torch.randn(40, 8)
    with pytest.raises(ValueError, match="do not match"):
        linear(torch.randn(4, 8), w, packed=pack_weight(torch.randn(50, 8)))


def test_a_packed_copy_is_stale_after_an_in_place_write_or_a_move() -> None:
    w = torch.randn(20, 6)
    copy = PackedWeight(w)
    assert copy.is_current(w)
    assert not copy.is_current(w.clone())
    w.mul_(2)
    assert not copy.is_current(w)
    fresh = PackedWeight(w)
    assert torch.equal(fresh.panels[0, :, 0], w[0])


def test_a_packed_copy_of_an_inference_tensor_checks_identity_and_storage() -> None:
    with torch.inference_mode():
        w = torch.randn(20, 6)
    copy = PackedWeight(w)
    assert copy.is_current(w)
    assert not copy.is_current(w.clone())


@needs_kernels
def test_a_layer_rebuilds_its_panels_after_an_in_place_write(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvfence.engine.config import ModelConfig

    monkeypatch.setenv("KVFENCE_PACKED_WEIGHTS", "1")
    cfg = ModelConfig.from_dict({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 50, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
    })
    layer = llama.LlamaDecoderLayer(cfg, torch.float32, torch.device("cpu"))
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_()
    first = layer.fused_kernel()
    assert first is not None and layer.fused_kernel() is first
    with torch.no_grad():
        layer.mlp.down_proj.weight.add_(1.0)  # same storage, new values: the panels are stale
    second = layer.fused_kernel()
    assert second is not None and second is not first


@needs_kernels
@pytest.mark.parametrize("switch", ["0", None])  # off by default: a second weight copy costs KV capacity
def test_no_panels_when_switched_off(monkeypatch: pytest.MonkeyPatch, switch: str | None) -> None:
    if switch is None:
        monkeypatch.delenv("KVFENCE_PACKED_WEIGHTS", raising=False)
    else:
        monkeypatch.setenv("KVFENCE_PACKED_WEIGHTS", switch)
    w = {name: torch.randn(*shape) for name, shape in
         {"qkv": (64, 32), "o": (32, 32), "gate_up": (96, 32), "down": (32, 48)}.items()}
    kernel = DecoderLayerKernel.build(
        input_norm=torch.ones(32), post_norm=torch.ones(32), eps=1e-5, qkv=(w["qkv"], None), o=(w["o"], None),
        gate_up=(w["gate_up"], None), down=(w["down"], None), num_heads=4, num_kv_heads=2, head_dim=8,
    )
    assert kernel is not None
    assert kernel._packed == ()
    assert kernel._layer.qkv.packed is None


@needs_kernels
def test_engine_gives_the_same_tokens_with_and_without_panels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 3-7 decode rows run the panels; their bits are the unpacked tile's, so every token must match.
    # (Against transformers the fused layers' own test covers the engine; here the panels' effect.)
    model_dir = build_tiny_model(tmp_path / "llama", "llama")
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 23, 9, 14, 3, 30, 11)]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("KVFENCE_PACKED_WEIGHTS", switch)
        llm = LLM(model=str(model_dir), kv_cache_tokens=1024, page_size=8, device="cpu", max_num_seqs=5)
        use_gemv_kernel(True)  # whatever the engine's calibration chose on this machine
        runs[switch] = [o.token_ids for o in llm.generate(prompts, params)]
        model = llm.engine.runner.model
        layers = [m for m in model.modules() if isinstance(m, llama.LlamaDecoderLayer)]
        kernels = [layer.fused_kernel() for layer in layers]
        assert kernels and all(k is not None and bool(k._packed) == (switch == "1") for k in kernels)
        assert (model._lm_head_packed is not None) == (switch == "1")
    assert runs["1"] == runs["0"]
