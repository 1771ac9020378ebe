"""Phi-3 LongRoPE across ``original_max_position_embeddings`` during generation, against transformers.

transformers' Phi-3 ``generate`` rotates with the short factors while the sequence fits in the
original length; the first time it grows past it, it drops its cache and recomputes the whole
sequence with the long factors (``Phi3ForCausalLM.prepare_inputs_for_generation``). The engine
recomputes such a sequence the same way (the scheduler releases its pages and queues it again), in
a batch with sequences that never cross or start past the threshold, in prefill chunks, under a pool
that preempts, and with prefix hits on both sides of the switch.

The tiny model's q/k projections are scaled up so that its attention, and so its greedy tokens,
depend on the rotation (with the default random weights they barely do, and keeping the stale
short-factor KV would pass unnoticed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.config import ModelConfig
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.scope import TenantIdentity
from tests.engine.tiny_models import build_tiny_model, hf_greedy

NEW_TOKENS = 16
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, temperature=0.0)
ORIGINAL = 32  # original_max_position_embeddings: the switch

ROPES: dict[str, dict[str, Any]] = {
    # half of each 16-wide head rotated (the per-op path)
    "partial": {"rope_theta": 10000.0, "rope_type": "longrope", "partial_rotary_factor": 0.5,
                "short_factor": [1.0 + 0.25 * i for i in range(4)], "long_factor": [3.0 + i for i in range(4)]},
    # whole heads rotated (the fused CPU decode kernel)
    "full": {"rope_theta": 10000.0, "rope_type": "longrope",
             "short_factor": [1.0 + 0.1 * i for i in range(8)], "long_factor": [1.0 + 6.0 * i for i in range(8)]},
}

# below the switch and crossing it while generating (20, 25, 30, 32: the last crosses at its first
# decode), never reaching it (3), past it from the start (33, 40)
LENGTHS = (25, 3, 40, 20, 32, 33, 30)
CROSSING = sum(1 for n in LENGTHS if n <= ORIGINAL < n + NEW_TOKENS - 1)

ENGINES: dict[str, dict[str, Any]] = {
    "batched": {"max_model_len": 128, "kv_cache_tokens": 1024, "page_size": 8},
    "chunked": {"max_model_len": 128, "kv_cache_tokens": 1024, "page_size": 4, "max_prefill_chunk": 7, "max_num_batched_tokens": 12,
                "max_num_seqs": 3, "verify_isolation": True},  # paranoid mode: I1 re-checked every step
    "preempting": {"max_model_len": "auto", "kv_cache_tokens": 80, "page_size": 8},
}


def build_crossing_model(out: Path, rope: str) -> Path:
    """A tiny Phi-3 whose LongRoPE switches at ORIGINAL tokens and whose greedy tokens follow the rotation."""
    import transformers

    model_dir = build_tiny_model(out, "phi3", max_position_embeddings=128, original_max_position_embeddings=ORIGINAL,
                                 rope_parameters=dict(ROPES[rope]))
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    qk_rows = (cfg.num_attention_heads + cfg.num_key_value_heads) * head_dim
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.qkv_proj.weight[:qk_rows] *= 3.0  # sharper attention: tokens follow the rotation
    model.save_pretrained(model_dir)
    return model_dir


def _prompts(*lengths: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


Tiny = tuple[Path, list[list[int]], list[list[int]]]


@pytest.fixture(scope="module", params=list(ROPES))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    model_dir = build_crossing_model(tmp_path_factory.mktemp(f"phi3-{request.param}"), request.param)
    prompts = _prompts(*LENGTHS)
    return model_dir, prompts, hf_greedy(model_dir, prompts, NEW_TOKENS)


def _llm(model_dir: Path, **engine: Any) -> LLM:
    return LLM(model=str(model_dir), device="cpu", **engine)


def test_the_switch_is_read_as_transformers_reads_it(tiny: Tiny) -> None:
    cfg = ModelConfig.from_dir(tiny[0])
    assert cfg.rope_scaling is not None and cfg.rope_scaling["original_max_position_embeddings"] == ORIGINAL
    assert cfg.recompute_at_rope_switch


@pytest.mark.parametrize("engine", list(ENGINES))
def test_crossing_while_generating_matches_transformers(tiny: Tiny, engine: str) -> None:
    model_dir, prompts, reference = tiny
    llm = _llm(model_dir, **ENGINES[engine])
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == reference
    assert llm.engine.scheduler.num_rope_recomputes == CROSSING and llm.engine.isolation_incidents == 0
    assert llm.engine.stats().num_rope_recomputes == CROSSING
    if engine == "preempting":
        assert llm.engine.stats().num_preemptions > 0
    assert llm.engine.pool_is_zero()  # the recompute released its pages through the scrubbing path (I2)


def test_prefix_hits_on_both_sides_of_the_switch(tiny: Tiny) -> None:
    """A repeat hits the prompt's short-factor pages, and its recompute at the switch hits the pages
    the first run's recompute wrote with the long factors; a 33-token prompt (past the switch from
    the start) maps those long-factor pages, a 30-token one (below it) only short-factor ones."""
    model_dir, prompts, reference = tiny
    llm = _llm(model_dir, **ENGINES["batched"])
    tenant = TenantIdentity(organization="acme")
    first = prompts[0]  # 25 tokens: crosses after 8 generated tokens
    assert llm.generate([first], GREEDY, tenant=tenant)[0].token_ids == reference[0]
    again = llm.generate([first], GREEDY, tenant=tenant)[0]
    # its usage counts the prompt's hits at admission, not its recompute's
    assert again.token_ids == reference[0] and again.num_cached_tokens == 24
    long_hits = {k: v for k, v in llm.engine.stats().prefix_hit_tokens_by_scope.items()
                 if k.endswith(b"|rope-length:33")}
    assert list(long_hits.values()) == [32]  # the recompute of the repeat: 4 long-factor pages mapped
    sequence = first + reference[0]
    past, below = sequence[:ORIGINAL + 1], sequence[:30]
    outs = [llm.generate([p], GREEDY, tenant=tenant)[0] for p in (past, below)]
    assert [o.num_cached_tokens for o in outs] == [32, 24]
    assert [o.token_ids for o in outs] == hf_greedy(model_dir, [past, below], NEW_TOKENS)
    assert llm.engine.scheduler.num_rope_recomputes == 3  # the two runs of `first`, then `below`
