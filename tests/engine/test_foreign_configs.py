"""config.json shapes kvfence did not write, against transformers' own greedy ``generate``.

Each case saves a tiny random model with transformers' ``save_pretrained`` (through ``build_tiny_model``)
and loads it by the real path, ``LLM(model=dir)``. Prompts of 3, 40 and 70 tokens, so sliding windows
and scaled RoPE frequencies are exercised past their boundaries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.tiny_models import build_tiny_model, hf_greedy

NEW_TOKENS = 12
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)


def _prompts(*lengths: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


def _ours(model_dir: Path, prompts: list[list[int]], **kwargs: Any) -> list[list[int]]:
    llm = LLM(model=str(model_dir), max_model_len=128, kv_cache_tokens=1024, page_size=8, device="cpu", **kwargs)
    return [o.token_ids for o in llm.generate(prompts, GREEDY)]


def _assert_matches_transformers(model_dir: Path, lengths: tuple[int, ...] = (3, 40, 70)) -> None:
    prompts = _prompts(*lengths)
    assert _ours(model_dir, prompts) == hf_greedy(model_dir, prompts, NEW_TOKENS)


_ROPE = {"rope_theta": 10000.0}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # head_dim set explicitly, unequal to hidden_size / num_attention_heads (64 / 4 = 16)
    "llama-head-dim-32": ("llama", {"head_dim": 32}),
    "llama-attention-and-mlp-bias": ("llama", {"attention_bias": True, "mlp_bias": True}),
    # tied embeddings on Llama, one KV head for four query heads, a vocabulary not a multiple of 8
    "llama-tied-mqa-odd-vocab": ("llama", {"tie_word_embeddings": True, "num_key_value_heads": 1, "vocab_size": 263}),
    # every layer windowed (max_window_layers 0): the 40 and 70 token prompts outgrow the window
    "qwen2-sliding-every-layer": ("qwen2", {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 0}),
    "mistral-window-8": ("mistral", {"sliding_window": 8}),
    # transformers scales dynamic NTK past max_position_embeddings only, whatever the dict says
    "rope-dynamic-with-original": ("llama", {"max_position_embeddings": 128, "rope_parameters": {
        **_ROPE, "rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 32}}),
}

SLOW_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "rope-yarn-attention-factor": ("llama", {"max_position_embeddings": 128, "rope_parameters": {
        **_ROPE, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "attention_factor": 0.8}}),
    "qwen2-untied": ("qwen2", {"tie_word_embeddings": False}),
    # a window in config.json that use_sliding_window false turns off
    "qwen2-sliding-window-off": ("qwen2", {"use_sliding_window": False, "sliding_window": 16, "max_window_layers": 0}),
    "rope-yarn-mscale": ("llama", {"max_position_embeddings": 128, "rope_parameters": {
        **_ROPE, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
        "mscale": 1.0, "mscale_all_dim": 0.5}}),
    "llama-head-dim-8": ("llama", {"head_dim": 8}),
    "qwen2-yarn-betas-untruncated": ("qwen2", {"max_position_embeddings": 128, "rope_parameters": {
        "rope_theta": 1e6, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
        "beta_fast": 16, "beta_slow": 2, "truncate": False}}),
    "rope-yarn-without-original": ("llama", {"max_position_embeddings": 128, "rope_parameters": {
        **_ROPE, "rope_type": "yarn", "factor": 4.0}}),
    "rope-llama3-theta-500000": ("llama", {"max_position_embeddings": 128, "rope_parameters": {
        "rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    "mistral-mqa-head-dim-32": ("mistral", {"sliding_window": 24, "head_dim": 32}),
    # a YaRN factor left out: transformers takes max_position_embeddings / original
    "rope-yarn-factor-from-lengths": ("llama", {"max_position_embeddings": 128, "rope_parameters": {
        **_ROPE, "rope_type": "yarn", "factor": None, "original_max_position_embeddings": 32}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_config_variant_matches_transformers(case: str, tmp_path: Path) -> None:
    arch, overrides = CASES[case]
    _assert_matches_transformers(build_tiny_model(tmp_path / case, arch, **overrides))


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SLOW_CASES))
def test_more_config_variants_match_transformers(case: str, tmp_path: Path) -> None:
    arch, overrides = SLOW_CASES[case]
    _assert_matches_transformers(build_tiny_model(tmp_path / case, arch, **overrides))


def test_older_config_json_spellings_rope_scaling_and_top_level_theta(tmp_path: Path) -> None:
    """transformers 4 wrote ``rope_theta`` at the top level and ``rope_scaling`` with ``type``; a config
    in that form must load as transformers 5 reads it (the theta matters: 500 is far from the default)."""
    model_dir = build_tiny_model(tmp_path / "old", "llama", max_position_embeddings=128,
                                 rope_parameters={"rope_theta": 500.0, "rope_type": "linear", "factor": 2.0})
    config = json.loads((model_dir / "config.json").read_text())
    del config["rope_parameters"]
    config["rope_theta"] = 500.0
    config["rope_scaling"] = {"type": "linear", "factor": 2.0}
    config["torch_dtype"] = config.pop("dtype", "float32")
    (model_dir / "config.json").write_text(json.dumps(config))
    _assert_matches_transformers(model_dir)


@pytest.mark.parametrize("attention_factor", [None, pytest.param(1.3, marks=pytest.mark.slow)])
def test_longrope_short_factors_and_attention_factor_match_transformers(
    attention_factor: float | None, tmp_path: Path
) -> None:
    """Within ``original_max_position_embeddings`` transformers uses the ``short_factor`` set and the
    attention factor, derived or given (past it, see test_length_dependent_rope.py); the servable
    context is ``max_position_embeddings``, which a longrope checkpoint states already stretched."""
    params: dict[str, Any] = {**_ROPE, "rope_type": "longrope", "original_max_position_embeddings": 64,
                              "short_factor": [1.0 + 0.3 * i for i in range(8)], "long_factor": [4.0] * 8}
    if attention_factor is not None:
        params["attention_factor"] = attention_factor
    model_dir = build_tiny_model(tmp_path / "longrope", "llama", max_position_embeddings=256, rope_parameters=params)
    prompts = _prompts(3, 20, 45)
    llm = LLM(model=str(model_dir), kv_cache_tokens=1024, page_size=8, device="cpu")
    assert llm.engine.capacity.max_model_len == 256
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == hf_greedy(model_dir, prompts, NEW_TOKENS)


@pytest.mark.parametrize("saved", [torch.bfloat16, pytest.param(torch.float16, marks=pytest.mark.slow)])
def test_half_precision_checkpoint_loads_as_float32_by_default(saved: torch.dtype, tmp_path: Path) -> None:
    """A bf16/fp16 checkpoint (``dtype`` in config.json) runs in float32 on the CPU unless told otherwise,
    and then matches transformers loading the same file in float32."""
    model_dir = build_tiny_model(tmp_path / str(saved), "llama", dtype=saved)
    assert json.loads((model_dir / "config.json").read_text()).get("dtype") == str(saved).removeprefix("torch.")
    prompts = _prompts(5, 33)
    assert _ours(model_dir, prompts, dtype="auto") == hf_greedy(model_dir, prompts, NEW_TOKENS, dtype=torch.float32)


def test_float16_weights_run_in_float16(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "fp16", "qwen2", dtype=torch.float16)
    llm = LLM(model=str(model_dir), max_model_len=128, kv_cache_tokens=512, dtype="float16", device="cpu")
    assert llm.engine.runner.model.model.embed_tokens.weight.dtype == torch.float16
    out = llm.generate(_prompts(9), GREEDY)[0]
    assert len(out.token_ids) == NEW_TOKENS
