"""Greedy outputs equal transformers' generate, token for token (batching, cache hits, preemption, chunking)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.tiny_models import build_tiny_model, hf_greedy

NEW_TOKENS = 16
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)

ARCHS: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen2": {},  # q/k/v bias, tied embeddings
    "mistral": {"sliding_window": 24},  # prompts longer than the window use the windowed mask
}


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (3, 17, 40, 29)]
    prompts.append(prompts[2] + torch.randint(0, 256, (13,), generator=g).tolist())  # shares a prefix
    return prompts


@pytest.fixture(scope="module", params=list(ARCHS))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[int]], list[list[int]]]:
    arch = request.param
    model_dir = build_tiny_model(tmp_path_factory.mktemp(arch), arch, **ARCHS[arch])
    prompts = _prompts()
    return model_dir, prompts, hf_greedy(model_dir, prompts, NEW_TOKENS)


def test_batch_of_different_lengths_matches_transformers(tiny: tuple[Path, list[list[int]], list[list[int]]]) -> None:
    model_dir, prompts, reference = tiny
    llm = LLM(model=str(model_dir), kv_cache_tokens=4096, page_size=8, device="cpu")
    first = llm.generate(prompts, GREEDY)
    assert [o.token_ids for o in first] == reference
    assert all(o.finish_reason == "length" for o in first)
    # The same batch again: every prompt is now served partly from the prefix cache.
    second = llm.generate(prompts, GREEDY)
    assert [o.token_ids for o in second] == reference
    assert [o.num_cached_tokens for o in second] == [((len(p) - 1) // 8) * 8 for p in prompts]
    assert sum(o.num_cached_tokens for o in second) > 0


def test_preemption_under_a_tiny_pool_keeps_outputs(tiny: tuple[Path, list[list[int]], list[list[int]]]) -> None:
    model_dir, prompts, reference = tiny
    llm = LLM(model=str(model_dir), max_model_len="auto", kv_cache_tokens=96, page_size=8, device="cpu")
    outs = llm.generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == reference
    assert llm.engine.stats().num_preemptions > 0
    assert llm.engine.pool_is_zero()


def test_chunked_prefill_keeps_outputs(tiny: tuple[Path, list[list[int]], list[list[int]]]) -> None:
    model_dir, prompts, reference = tiny
    llm = LLM(
        model=str(model_dir), kv_cache_tokens=2048, page_size=4, device="cpu",
        max_prefill_chunk=7, max_num_batched_tokens=12, max_num_seqs=3,
    )
    outs = llm.generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == reference
