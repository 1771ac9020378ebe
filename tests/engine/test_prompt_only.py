"""``max_tokens=0``: the prompt is computed (and scored with ``prompt_logprobs``), nothing is sampled.

lm-eval's loglikelihood requests send the whole context and generate nothing; a prompt of exactly
``max_model_len`` tokens must then be scored in a pool of exactly that many tokens, since no
position past the prompt is ever sampled or written.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.core.scheduler import ScheduledSeq
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.scope import TenantIdentity
from tests.engine.tiny_models import build_tiny_model

MAX_LEN = 32
TOLERANCE = 2e-4  # nats, float32
ALICE = TenantIdentity(organization="alice")


@pytest.fixture(scope="module")
def model_and_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    import transformers

    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny"), "llama")
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    def reference(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)

    return model_dir, reference


@pytest.fixture
def llm(model_and_reference: tuple[Path, Any]) -> Iterator[LLM]:
    # The pool holds exactly one max_model_len sequence: a sampled position past it could not fit.
    yield LLM(str(model_and_reference[0]), max_model_len=MAX_LEN, kv_cache_tokens=MAX_LEN, page_size=4,
              max_num_batched_tokens=12, max_prefill_chunk=8)


def _prompt(n: int, seed: int = 3) -> list[int]:
    return torch.randint(1, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _spy_on_batches(llm: LLM) -> list[ScheduledSeq]:
    seen: list[ScheduledSeq] = []
    execute = llm.engine.runner.execute

    def spy(items: list[ScheduledSeq], *args: Any) -> Any:
        seen.extend(items)
        return execute(items, *args)

    llm.engine.runner.execute = spy  # type: ignore[method-assign]
    return seen


def test_a_prompt_of_the_whole_context_is_scored_without_sampling(llm: LLM, model_and_reference: Any) -> None:
    _, reference = model_and_reference
    prompt = _prompt(MAX_LEN)
    seen = _spy_on_batches(llm)
    out = llm.generate([prompt], SamplingParams(max_tokens=0, prompt_logprobs=2), tenant=ALICE)[0]
    assert out.text == "" and out.token_ids == [] and out.finish_reason == "length"
    assert not any(it.samples for it in seen)  # no position was sampled
    assert sum(it.num_new_tokens for it in seen) == MAX_LEN  # the prompt, chunked, nothing more
    entries = out.prompt_logprobs
    assert entries is not None and len(entries) == MAX_LEN and entries[0] is None
    ref = reference(prompt)
    for i in range(1, MAX_LEN):
        entry = entries[i]
        assert entry is not None
        assert abs(entry[prompt[i]].logprob - float(ref[i - 1, prompt[i]])) < TOLERANCE
    assert llm.engine.block_manager.num_used_pages == 0 or llm.engine.pool_is_zero()
    assert not llm.engine.has_unfinished_requests()


def test_prompt_only_choices_and_a_generating_neighbour(llm: LLM) -> None:
    short, other = _prompt(9, seed=5), _prompt(7, seed=6)
    greedy = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    alone = llm.generate([other], greedy, tenant=ALICE)[0]
    outs = llm.generate([short, other], [SamplingParams(max_tokens=0, n=2), greedy], tenant=ALICE)
    assert [(c.text, c.token_ids, c.finish_reason) for c in outs[0].outputs] == [("", [], "length")] * 2
    assert outs[1].token_ids == alone.token_ids  # the neighbour in the batch is unaffected
    assert not llm.engine.has_unfinished_requests()
    assert llm.engine.pool_is_zero()


def test_max_tokens_zero_still_checks_the_context(llm: LLM) -> None:
    from kvfence.errors import ContextLengthExceededError

    with pytest.raises(ContextLengthExceededError):
        llm.generate([_prompt(MAX_LEN + 1)], SamplingParams(max_tokens=0))
    with pytest.raises(ContextLengthExceededError):
        llm.generate([_prompt(MAX_LEN)], SamplingParams(max_tokens=1))
