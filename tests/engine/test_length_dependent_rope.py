"""RoPE that depends on the sequence's length (``dynamic`` NTK, ``longrope``) past its threshold, against
transformers' greedy ``generate``, one prompt at a time.

transformers rescales per forward call from the longest position in it and keeps cached keys as they
were rotated, so a prompt of P tokens is rotated for length P and each generated token at position p for
p + 1. The engine does the same per request, in chunked prefill, decode and mixed batches; and a prefix
page written by a prompt past the threshold is a hit only for a prompt of the same length.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.scope import TenantIdentity
from tests.engine.tiny_models import build_tiny_model, hf_greedy

NEW_TOKENS = 12
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
THRESHOLD = 32

ROPES: dict[str, dict[str, Any]] = {
    # transformers scales past max_position_embeddings; 4x it is the servable context (as vLLM derives it)
    "dynamic": {"max_position_embeddings": THRESHOLD, "rope_parameters": {
        "rope_theta": 10000.0, "rope_type": "dynamic", "factor": 4.0}},
    "longrope": {"max_position_embeddings": 128, "rope_parameters": {
        "rope_theta": 10000.0, "rope_type": "longrope", "original_max_position_embeddings": THRESHOLD,
        "short_factor": [1.0 + 0.3 * i for i in range(8)], "long_factor": [2.0 + 1.5 * i for i in range(8)]}},
}


def _prompts(*lengths: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(23)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


def _llm(model_dir: Path) -> LLM:
    return LLM(model=str(model_dir), max_model_len=128, kv_cache_tokens=1024, page_size=8, device="cpu",
               max_prefill_chunk=7, max_num_batched_tokens=12, max_num_seqs=3)


@pytest.mark.parametrize("rope", list(ROPES))
def test_past_the_threshold_matches_transformers(rope: str, tmp_path: Path) -> None:
    """Prompts below it, crossing it while generating (25 + 12) and past it (40, 70), in one batch.
    transformers' dynamic NTK keeps the largest length it has seen, so its prompts go in growing order."""
    model_dir = build_tiny_model(tmp_path / rope, "llama", **ROPES[rope])
    prompts = _prompts(3, 25, 40, 70)
    llm = _llm(model_dir)
    assert llm.engine.capacity.max_model_len == 128
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == hf_greedy(model_dir, prompts, NEW_TOKENS)


def test_prefix_pages_past_the_threshold_are_shared_only_at_the_same_length(tmp_path: Path) -> None:
    """A 40-token prompt rotates all its tokens for length 40: its pages must not serve a 48-token prompt
    that starts with it, nor a 20-token one; the same 40 tokens again do hit them."""
    model_dir = build_tiny_model(tmp_path / "longrope", "llama", **ROPES["longrope"])
    first = _prompts(40)[0]
    longer = first + _prompts(8)[0]
    shorter = first[:20]
    llm = _llm(model_dir)
    tenant = TenantIdentity(organization="acme")
    llm.generate([first], GREEDY, tenant=tenant)
    outs = [llm.generate([p], GREEDY, tenant=tenant)[0] for p in (longer, shorter, first)]
    assert [o.num_cached_tokens for o in outs] == [0, 0, (len(first) - 1) // 8 * 8]  # its last token is computed
    expected = hf_greedy(model_dir, [shorter, first, longer], NEW_TOKENS)  # growing lengths, see above
    assert [outs[1].token_ids, outs[2].token_ids, outs[0].token_ids] == expected
