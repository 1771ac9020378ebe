"""``repetition_penalty`` equals transformers' ``RepetitionPenaltyLogitsProcessor``: on logits, and
greedy decoding through the engine equals transformers' ``generate(repetition_penalty=...)``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvfence.engine.layers.penalties import apply_penalties
from kvfence.engine.layers.sampler import SampleRow
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.engine.tiny_models import build_tiny_model


@pytest.mark.parametrize("penalty", [0.7, 1.3, 2.0])
def test_repetition_penalty_equals_the_transformers_processor(penalty: float) -> None:
    from transformers import RepetitionPenaltyLogitsProcessor

    g = torch.Generator().manual_seed(5)
    vocab = 50
    logits = torch.randn(3, vocab, generator=g) * 3
    histories = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (1, 9, 30)]
    rows = [SampleRow(SamplingParams(repetition_penalty=penalty), None, 0, [], [], h) for h in histories]
    ours = logits.clone()
    apply_penalties(ours, rows)
    processor = RepetitionPenaltyLogitsProcessor(penalty)
    for i, history in enumerate(histories):
        theirs = processor(torch.tensor([history]), logits[i : i + 1].clone())[0]
        torch.testing.assert_close(ours[i], theirs)


def test_greedy_with_repetition_penalty_equals_transformers_generate(tmp_path: Path) -> None:
    import transformers

    model_dir = build_tiny_model(tmp_path, "llama")
    prompts = [[5, 6, 7, 5, 6, 7, 5], [100, 101, 100, 99, 98, 97, 96, 95, 100, 101, 100]]
    num_new, penalty = 12, 1.5
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    expected = []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids])
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=num_new,
                                 min_new_tokens=num_new, do_sample=False, repetition_penalty=penalty, pad_token_id=0)
            expected.append(out[0, len(ids):].tolist())
    llm = LLM(str(model_dir), max_model_len=256, kv_cache_tokens=512, page_size=4)
    params = SamplingParams(max_tokens=num_new, min_tokens=num_new, temperature=0.0, repetition_penalty=penalty)
    got = [o.token_ids for o in llm.generate(prompts, params)]
    assert got == expected
    plain = [o.token_ids for o in llm.generate(prompts, SamplingParams(max_tokens=num_new, min_tokens=num_new,
                                                                       temperature=0.0))]
    assert plain != got  # the penalty changed something, so the comparison above tests it
