"""Models that window some layers and not others (Qwen2 ``use_sliding_window`` with ``max_window_layers``
or ``layer_types``), served past their window, against transformers' greedy ``generate``.

Each layer gets its own mask: windowed layers see the last ``sliding_window`` tokens, full layers the
whole context, in chunked prefill (on top of cached prefix pages too), in decode and in a mixed batch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.config import ModelConfig
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.scope import TenantIdentity
from tests.engine.tiny_models import build_tiny_model, hf_greedy

NEW_TOKENS = 12
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
WINDOW = 16


def _prompts(*lengths: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(5)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


def _mixed_model(tmp_path: Path, **layout: Any) -> Path:
    return build_tiny_model(tmp_path / "mixed", "qwen2", use_sliding_window=True, sliding_window=WINDOW,
                            num_hidden_layers=3, **layout)


@pytest.mark.parametrize("layout", [
    {"max_window_layers": 1},  # layer 0 full, layers 1-2 windowed
    pytest.param({"layer_types": ["sliding_attention", "full_attention", "sliding_attention"]},
                 marks=pytest.mark.slow),
])
def test_mixed_layers_match_transformers_past_the_window(layout: dict[str, Any], tmp_path: Path) -> None:
    """Prompts shorter than, crossing (10 + 12 generated) and much longer than the window, in one
    batch whose prompts are split into chunks that share steps with other requests' decodes."""
    model_dir = _mixed_model(tmp_path, **layout)
    cfg = ModelConfig.from_dir(model_dir)
    assert cfg.sliding_window == WINDOW and cfg.full_attention_layers  # both kinds present
    prompts = _prompts(3, 10, 40, 70)
    expected = hf_greedy(model_dir, prompts, NEW_TOKENS)
    llm = LLM(model=str(model_dir), max_model_len=128, kv_cache_tokens=1024, page_size=8, device="cpu",
              max_prefill_chunk=7, max_num_batched_tokens=12, max_num_seqs=3)
    assert llm.engine.capacity.max_model_len == 128  # not capped at the window any more
    tenant = TenantIdentity(organization="acme")
    first = llm.generate(prompts, GREEDY, tenant=tenant)
    assert [o.token_ids for o in first] == expected
    # the same prompts again: their full pages come from the prefix cache, chunks attend on top of them
    again = llm.generate(prompts, GREEDY, tenant=tenant)
    assert sum(o.num_cached_tokens for o in again) > 0
    assert [o.token_ids for o in again] == expected


def test_a_single_mask_for_every_layer_would_differ(tmp_path: Path) -> None:
    """The test above can fail: windowing the full layer too (or no layer) changes this model's answer."""
    model_dir = _mixed_model(tmp_path, max_window_layers=1)
    prompts = _prompts(70)
    expected = hf_greedy(model_dir, prompts, NEW_TOKENS)
    assert ModelConfig.from_dir(model_dir).full_attention_layers == frozenset({0})
    for window in (WINDOW, None):  # every layer windowed, then no layer
        llm = LLM(model=str(model_dir), max_model_len=128, kv_cache_tokens=1024, page_size=8, device="cpu")
        runner = llm.engine.runner
        runner.cfg = dataclasses.replace(runner.cfg, sliding_window=window, full_attention_layers=frozenset())
        assert [o.token_ids for o in llm.generate(prompts, GREEDY)] != expected
