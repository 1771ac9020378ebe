"""The disaggregated handoff (I4) on Qwen3, Gemma 3 and Phi-3 checkpoints: a spawned prefill worker
prefills, the decode side verifies every page and decodes; the answer is transformers' greedy one.

Gemma 3's local layers window at 12 tokens and its prompts are longer, so the decode side reads the
handed-over pages through each layer's own window."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvfence.disagg.config import DisaggConfig
from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.engine.config import EngineConfig
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.disagg.helpers import drive
from tests.engine.test_phi3_longrope_crossing import build_crossing_model
from tests.engine.tiny_models import build_tiny_model, hf_greedy

NEW_TOKENS = 10


@pytest.mark.parametrize("arch", [pytest.param("qwen3", marks=pytest.mark.slow), "gemma3",
                                  pytest.param("phi3", marks=pytest.mark.slow)])
def test_handoff_answer_equals_transformers(arch: str, tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / arch, arch)
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 30, 61)]
    expected = hf_greedy(model_dir, prompts, NEW_TOKENS)
    config = EngineConfig(model=str(model_dir), kv_cache_tokens=768, max_model_len=256, max_prefill_chunk=24,
                          page_size=8, num_threads=1)
    engine = DisaggregatedEngine(DisaggConfig(engine=config, handoff_timeout_s=60))
    try:
        params = SamplingParams(max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, temperature=0.0)
        ids = [f"{arch}-{i}" for i in range(len(prompts))]
        for rid, prompt in zip(ids, prompts, strict=True):
            engine.add_request(rid, prompt, params, b"scope-" + arch.encode())
        outs = drive(engine, ids)
        assert [outs[rid][-1].token_ids for rid in ids] == expected
        stats = engine.stats()
        assert stats.handoff_failures == {} and stats.num_handoffs_verified == len(prompts)
        assert engine.pool_is_zero()
    finally:
        engine.close()


def test_phi3_crossing_the_longrope_switch_on_the_decode_side_equals_transformers(tmp_path: Path) -> None:
    """A 25-token prompt prefilled by the worker grows past Phi-3's LongRoPE switch (32) while the decode
    side generates: the decode side recomputes it with the long factors, as transformers does; a
    40-token prompt is past it from the start (its scope narrowed on both sides)."""
    model_dir = build_crossing_model(tmp_path / "phi3", "full")
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (25, 40)]
    params = SamplingParams(max_tokens=16, min_tokens=16, temperature=0.0)
    expected = hf_greedy(model_dir, prompts, 16)
    config = EngineConfig(model=str(model_dir), kv_cache_tokens=768, max_model_len=128, page_size=8, num_threads=1)
    engine = DisaggregatedEngine(DisaggConfig(engine=config, handoff_timeout_s=60))
    try:
        ids = [f"phi3-cross-{i}" for i in range(len(prompts))]
        for rid, prompt in zip(ids, prompts, strict=True):
            engine.add_request(rid, prompt, params, b"scope-phi3")
        outs = drive(engine, ids)
        assert [outs[rid][-1].token_ids for rid in ids] == expected
        assert engine.core.scheduler.num_rope_recomputes == 1
        assert engine.pool_is_zero()
    finally:
        engine.close()
