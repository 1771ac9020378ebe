"""Qwen3, Gemma 3 (text) and Phi-3 against transformers' greedy ``generate``, token for token.

Tiny random checkpoints saved by transformers itself (``build_tiny_model``), loaded by the real path.
Every case runs the same batch of prompts of different lengths (3 to 53 tokens: past Gemma 3's
12-token window and Qwen3's 16-token one) three ways: batched, then again from the prefix cache;
under a pool small enough to preempt; in small prefill chunks mixed with other requests' decodes.

``min_tokens`` bans EOS as ``min_new_tokens`` does in ``generate`` (these random models do predict
their EOS id now and then). bfloat16 is held to the tolerance of ``test_precision_and_rope.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.config import ModelConfig
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ModelLoadError
from kvfence.scope import TenantIdentity
from tests.engine.test_precision_and_rope import BF16_TOLERANCE, _compare
from tests.engine.tiny_models import build_tiny_model, hf_greedy

NEW_TOKENS = 14
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, temperature=0.0)

_LONGROPE = {"rope_theta": 10000.0, "rope_type": "longrope", "original_max_position_embeddings": 64,
             "short_factor": [1.0 + 0.25 * i for i in range(4)], "long_factor": [3.0 + i for i in range(4)]}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3": ("qwen3", {}),  # GQA 4:2, head_dim 32 != 64 / 4, q/k norms
    # Qwen3 with mixed layers: layer 0 full, layers 1-2 windowed (16 tokens)
    "qwen3-mixed-window": ("qwen3", {"num_hidden_layers": 3, "use_sliding_window": True, "sliding_window": 16,
                                     "max_window_layers": 1}),
    # two local layers (window 12) and one global, each kind with its own RoPE base
    "gemma3": ("gemma3", {}),
    # logit soft-capping, a linearly scaled global RoPE, a local base unlike the default
    "gemma3-softcap-scaled-rope": ("gemma3", {"final_logit_softcapping": 3.0, "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 50_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 500.0}}}),
    "phi3": ("phi3", {}),  # fused qkv_proj / gate_up_proj in the checkpoint
    # half of each 16-wide head rotated, LongRoPE: the 53-token prompt crosses 64 while generating
    # (recomputed with the long factors, tests/engine/test_phi3_longrope_crossing.py), the others stay short
    "phi3-partial-longrope": ("phi3", {"max_position_embeddings": 256, "original_max_position_embeddings": 64,
                                       "rope_parameters": {**_LONGROPE, "partial_rotary_factor": 0.5}}),
}


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (3, 17, 40, 29)]
    prompts.append(prompts[2] + torch.randint(0, 256, (13,), generator=g).tolist())  # shares a prefix
    return prompts


Tiny = tuple[Path, list[list[int]], list[list[int]]]


@pytest.fixture(scope="module", params=list(CASES))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    arch, overrides = CASES[request.param]
    model_dir = build_tiny_model(tmp_path_factory.mktemp(request.param), arch, **overrides)
    prompts = _prompts()
    return model_dir, prompts, hf_greedy(model_dir, prompts, NEW_TOKENS)


def test_batch_and_prefix_hits_match_transformers(tiny: Tiny) -> None:
    model_dir, prompts, reference = tiny
    llm = LLM(model=str(model_dir), max_model_len=256, kv_cache_tokens=4096, page_size=8, device="cpu")
    tenant = TenantIdentity(organization="acme")
    assert [o.token_ids for o in llm.generate(prompts, GREEDY, tenant=tenant)] == reference
    again = llm.generate(prompts, GREEDY, tenant=tenant)
    assert [o.token_ids for o in again] == reference
    assert [o.num_cached_tokens for o in again] == [((len(p) - 1) // 8) * 8 for p in prompts]


def test_preemption_under_a_tiny_pool_keeps_outputs(tiny: Tiny) -> None:
    model_dir, prompts, reference = tiny
    llm = LLM(model=str(model_dir), max_model_len="auto", kv_cache_tokens=96, page_size=8, device="cpu")
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == reference
    assert llm.engine.stats().num_preemptions > 0
    assert llm.engine.pool_is_zero()  # every page scrubbed once released (I2)


def test_chunked_prefill_keeps_outputs(tiny: Tiny) -> None:
    model_dir, prompts, reference = tiny
    llm = LLM(model=str(model_dir), max_model_len=256, kv_cache_tokens=2048, page_size=4, device="cpu",
              max_prefill_chunk=7, max_num_batched_tokens=12, max_num_seqs=3)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == reference


@pytest.mark.parametrize("arch", ["qwen3", "gemma3", "phi3"])
def test_bfloat16_within_tolerance(arch: str, tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / arch, arch, dtype=torch.bfloat16)
    _compare(model_dir, "bfloat16", BF16_TOLERANCE)


def test_phi3_longrope_past_the_original_length_matches_transformers(tmp_path: Path) -> None:
    """A prompt longer than ``original_max_position_embeddings`` is rotated with the long factors
    throughout, in transformers and here; shorter prompts that stay short keep the short ones."""
    model_dir = build_tiny_model(tmp_path / "phi3", "phi3", max_position_embeddings=256,
                                 original_max_position_embeddings=64,  # Phi3Config's (4096 by default) wins
                                 rope_parameters={**_LONGROPE, "partial_rotary_factor": 0.5})
    assert ModelConfig.from_dir(model_dir).rope_scaling["original_max_position_embeddings"] == 64  # type: ignore[index]
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (80, 20)]
    llm = LLM(model=str(model_dir), max_model_len=256, kv_cache_tokens=2048, page_size=8, device="cpu")
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == hf_greedy(model_dir, prompts, NEW_TOKENS)


def test_gemma3_windows_exactly_the_sliding_layers(tmp_path: Path) -> None:
    """The tests above can fail: Gemma 3's layers read their window and RoPE from ``layer_types``."""
    model_dir = build_tiny_model(tmp_path / "gemma3", "gemma3")
    cfg = ModelConfig.from_dir(model_dir)
    assert (cfg.sliding_window, cfg.full_attention_layers) == (12, frozenset({2}))
    assert cfg.attention_scale == pytest.approx(24**-0.5) and cfg.qk_norm and cfg.tie_word_embeddings
    assert (cfg.rope_theta, cfg.local_rope_theta) == (1_000_000.0, 10_000.0)
    prompts = _prompts()[2:3]
    expected = hf_greedy(model_dir, prompts, NEW_TOKENS)
    config = json.loads((model_dir / "config.json").read_text())
    config["layer_types"] = ["sliding_attention"] * 3  # every layer local: another model
    (model_dir / "config.json").write_text(json.dumps(config))
    llm = LLM(model=str(model_dir), max_model_len=256, kv_cache_tokens=1024, page_size=8, device="cpu")
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] != expected


def test_gemma3_context_is_max_position_embeddings_whatever_its_rope_factor(tmp_path: Path) -> None:
    """Gemma 3's ``max_position_embeddings`` (131072) is already the length its linear factor 8 reaches:
    it is not multiplied again (a Llama with that factor serves 8x its positions, as vLLM derives both)."""
    scaled = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
              "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}
    gemma = ModelConfig.from_dir(build_tiny_model(tmp_path / "gemma3", "gemma3", max_position_embeddings=128,
                                                  rope_parameters=scaled))
    assert gemma.rope_scaling is not None and gemma.max_context_len == 128
    llama = ModelConfig.from_dir(build_tiny_model(tmp_path / "llama", "llama", max_position_embeddings=128,
                                                  rope_parameters={**scaled["full_attention"]}))
    assert llama.max_context_len == 1024


def test_transformers_4_gemma3_config_spelling(tmp_path: Path) -> None:
    """Gemma 3 checkpoints on the hub spell RoPE as ``rope_theta`` + ``rope_local_base_freq`` (+
    ``rope_scaling``) and the layout as ``sliding_window_pattern``; they load as transformers reads them."""
    model_dir = build_tiny_model(tmp_path / "gemma3", "gemma3", num_hidden_layers=4,
                                 layer_types=["sliding_attention", "full_attention"] * 2)
    config = json.loads((model_dir / "config.json").read_text())
    del config["rope_parameters"], config["layer_types"]
    config.update(rope_theta=1_000_000.0, rope_local_base_freq=10_000.0, sliding_window_pattern=2)
    (model_dir / "config.json").write_text(json.dumps(config))
    cfg = ModelConfig.from_dir(model_dir)
    assert cfg.full_attention_layers == frozenset({1, 3}) and cfg.local_rope_theta == 10_000.0
    prompts = _prompts()[1:3]
    llm = LLM(model=str(model_dir), max_model_len=256, kv_cache_tokens=1024, page_size=8, device="cpu")
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == hf_greedy(model_dir, prompts, NEW_TOKENS)


@pytest.mark.parametrize(("arch", "field", "value", "message"), [
    ("gemma3", "attn_logit_softcapping", 50.0, "attn_logit_softcapping=50.0 is not supported"),
    ("gemma3", "use_bidirectional_attention", True, "use_bidirectional_attention"),
    ("gemma3", "sliding_window", None, "sliding_window is null"),
    ("qwen3", "partial_rotary_factor", 0.5, "partial_rotary_factor=0.5 is not supported for Qwen3ForCausalLM"),
    ("phi3", "hidden_act", "relu", "unsupported hidden_act 'relu'"),
])
def test_unsupported_fields_are_named(arch: str, field: str, value: Any, message: str, tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / arch, arch)
    config = json.loads((model_dir / "config.json").read_text())
    config[field] = value
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=message):
        ModelConfig.from_dir(model_dir)


def test_gemma3_multimodal_checkpoint_is_refused_by_name(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "gemma3", "gemma3")
    config = json.loads((model_dir / "config.json").read_text())
    config["architectures"] = ["Gemma3ForConditionalGeneration"]
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="unsupported architecture Gemma3ForConditionalGeneration "
                                             r"\(the multimodal Gemma 3 checkpoints .* Gemma3ForCausalLM export"):
        ModelConfig.from_dir(model_dir)


VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # Gemma 3 1B's proportions: one KV head, head_dim above hidden / heads, the default layout
    # (sliding_window_pattern 6: layer 5 global) over 7 layers
    "gemma3-mqa-head-dim-32-default-layout": ("gemma3", {"num_key_value_heads": 1, "head_dim": 32,
                                                         "num_hidden_layers": 7, "layer_types": None}),
    "gemma3-every-layer-global": ("gemma3", {"layer_types": ["full_attention"] * 3}),
    # Phi-3-mini style: a window on every layer
    "phi3-window-every-layer": ("phi3", {"sliding_window": 16}),
    "qwen3-tied-mqa-bias": ("qwen3", {"tie_word_embeddings": True, "num_key_value_heads": 1, "attention_bias": True}),
}


@pytest.mark.parametrize("case", list(VARIANTS))
def test_config_variants_match_transformers(case: str, tmp_path: Path) -> None:
    arch, overrides = VARIANTS[case]
    model_dir = build_tiny_model(tmp_path / case, arch, **overrides)
    prompts = _prompts()
    llm = LLM(model=str(model_dir), max_model_len=256, kv_cache_tokens=1024, page_size=8, device="cpu")
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == hf_greedy(model_dir, prompts, NEW_TOKENS)


def test_phi3_older_longrope_spelling_su(tmp_path: Path) -> None:
    """Phi-3 files written before transformers 5 say ``rope_scaling: {"type": "su", ...}``: LongRoPE."""
    model_dir = build_tiny_model(tmp_path / "phi3", "phi3", max_position_embeddings=256,
                                 original_max_position_embeddings=64,
                                 rope_parameters={**_LONGROPE, "partial_rotary_factor": 0.5})
    config = json.loads((model_dir / "config.json").read_text())
    params = config.pop("rope_parameters")
    config.update(rope_theta=params.pop("rope_theta"), partial_rotary_factor=params.pop("partial_rotary_factor"),
                  original_max_position_embeddings=params["original_max_position_embeddings"])
    params.pop("rope_type")
    config["rope_scaling"] = {**params, "type": "su"}
    (model_dir / "config.json").write_text(json.dumps(config))
    cfg = ModelConfig.from_dir(model_dir)
    assert cfg.rope_scaling is not None and cfg.rope_scaling["rope_type"] == "longrope" and cfg.rotary_dim == 8
    prompts = _prompts()[:3]
    llm = LLM(model=str(model_dir), max_model_len=256, kv_cache_tokens=1024, page_size=8, device="cpu")
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == hf_greedy(model_dir, prompts, NEW_TOKENS)
