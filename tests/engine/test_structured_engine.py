"""Structured outputs through the engine itself (no HTTP): a shared processor, n > 1, batching.

One SamplingParams (so one processor) serves several sequences at once, in the same batch as an
unconstrained request; each sequence's answer must still satisfy the schema, and the plain request
must be unaffected.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.engine.structured import GrammarLogitsProcessor, GrammarSpec, compile_grammar
from tests.engine.test_structured_schemas import SCHEMAS, check_instance

PROMPT = "Reply in JSON:"


@pytest.fixture(scope="module")
def llm(default_model_dir: Path) -> LLM:
    return LLM(model=str(default_model_dir), kv_cache_tokens=8192, max_model_len="auto", device="cpu",
               cache_scope="request")


def _params(llm: LLM, name: str, **kwargs: object) -> SamplingParams:
    compiled = compile_grammar(llm.engine.tokenizer, GrammarSpec.json_schema(SCHEMAS[name]))
    return SamplingParams(max_tokens=600, temperature=1.0, logits_processors=[GrammarLogitsProcessor(compiled)],
                          **kwargs)  # type: ignore[arg-type]


def test_one_processor_for_n_choices_and_several_prompts(llm: LLM) -> None:
    shared = _params(llm, "nested", n=3, seed=5)
    plain = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    out = llm.generate([PROMPT, "unconstrained", "Another prompt:"], [shared, plain, shared])
    texts = [choice.text for i in (0, 2) for choice in out[i].outputs if choice.finish_reason == "stop"]
    assert len(texts) >= 4 and len(set(texts)) == len(texts)
    for text in texts:
        check_instance(json.loads(text), SCHEMAS["nested"])
    alone = llm.generate("unconstrained", plain)[0]
    assert out[1].token_ids == alone.token_ids  # the constrained rows did not touch the plain one


def test_greedy_and_seeded_runs_are_reproducible(llm: LLM) -> None:
    first = llm.generate(PROMPT, _params(llm, "person", seed=9))[0]
    again = llm.generate(PROMPT, _params(llm, "person", seed=9))[0]
    assert first.token_ids == again.token_ids and first.finish_reason == "stop"
    check_instance(json.loads(first.text), SCHEMAS["person"])
    greedy = llm.generate(PROMPT, SamplingParams(max_tokens=600, temperature=0, logits_processors=[
        GrammarLogitsProcessor(compile_grammar(llm.engine.tokenizer, GrammarSpec.json_schema(SCHEMAS["defs"])))]))[0]
    if greedy.finish_reason == "stop":
        check_instance(json.loads(greedy.text), SCHEMAS["defs"])
