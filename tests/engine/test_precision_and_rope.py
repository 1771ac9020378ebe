"""Teacher-forced log-probabilities against transformers: RoPE scaling variants (fp32) and bf16.

Stated tolerances: float32 within 2e-4 nats per token; bfloat16 within 0.15 nats per token (both
sides run in bf16, rounding differs by kernel order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.tiny_models import build_tiny_model

FP32_TOLERANCE = 2e-4
BF16_TOLERANCE = 0.15


def _hf_logprobs(model_dir: Path, ids: list[int], dtype: torch.dtype) -> torch.Tensor:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def _compare(model_dir: Path, dtype: str, tolerance: float, prompt_len: int = 40, new: int = 12) -> None:
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, 256, (prompt_len,), generator=g).tolist()
    llm = LLM(model=str(model_dir), kv_cache_tokens=2048, max_model_len="auto", page_size=8, dtype=dtype, device="cpu")  # type: ignore[arg-type]
    out = llm.generate([prompt], SamplingParams(max_tokens=new, temperature=0, logprobs=0, ignore_eos=True))[0]
    assert out.logprobs is not None
    reference = _hf_logprobs(model_dir, prompt + out.token_ids, torch.bfloat16 if dtype == "bfloat16" else torch.float32)
    ours = torch.tensor([entry[tok] for tok, entry in zip(out.token_ids, out.logprobs, strict=True)])
    theirs = torch.stack([reference[prompt_len - 1 + i, tok] for i, tok in enumerate(out.token_ids)])
    worst = (ours - theirs).abs().max().item()
    assert worst <= tolerance, f"max |logprob difference| {worst:.5f} > {tolerance}"


ROPE_VARIANTS: dict[str, dict[str, Any]] = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "llama3": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    },
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
}


@pytest.mark.parametrize("variant", list(ROPE_VARIANTS))
def test_rope_scaling_variants_match_transformers(variant: str, tmp_path: Path) -> None:
    params = {"rope_theta": 10000.0, **ROPE_VARIANTS[variant]}
    model_dir = build_tiny_model(tmp_path / variant, "llama", rope_parameters=params, max_position_embeddings=128)
    _compare(model_dir, "float32", FP32_TOLERANCE)


def test_bfloat16_within_tolerance(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "bf16", "qwen2", dtype=torch.bfloat16)
    _compare(model_dir, "bfloat16", BF16_TOLERANCE)


def test_float32_logprobs_match_closely(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "fp32", "qwen2")
    _compare(model_dir, "float32", FP32_TOLERANCE)


def test_yarn_and_linear_scaling_stretch_the_context_beyond_max_position_embeddings(tmp_path: Path) -> None:
    """As vLLM: a YaRN (Qwen2.5 long-context recipe) or linear model serves factor x its trained positions,
    and matches transformers there."""
    yarn = {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    model_dir = build_tiny_model(tmp_path / "yarn", "qwen2", rope_parameters=yarn, max_position_embeddings=64)
    assert LLM(model=str(model_dir), kv_cache_tokens=2048, device="cpu").engine.capacity.max_model_len == 256
    _compare(model_dir, "float32", FP32_TOLERANCE, prompt_len=150)
    linear = {"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0}
    model_dir = build_tiny_model(tmp_path / "linear", "llama", rope_parameters=linear, max_position_embeddings=64)
    _compare(model_dir, "float32", FP32_TOLERANCE, prompt_len=100)
