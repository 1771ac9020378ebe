"""The whole engine on the native runtime answers as on the torch runtime (greedy, float32).

``LLM(runtime="native")`` and ``LLM(runtime="torch")`` over the same checkpoint and pool run the
same continuous batches: mixed prefill and decode steps, prompts chunked across steps, prefix-cache
hits of one tenant, and a pool so small that requests are preempted and recomputed. Their greedy
tokens must be equal, and every freed page zero afterwards (I2), in both; so must their prompt
log-probabilities (values, ranks and top ids).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvfence.engine.llm import LLM, CompletionOutput
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ConfigError
from kvfence.scope import TenantIdentity
from tests.engine.tiny_models import build_tiny_model

PROMPTS = [
    "The isolation contract says that one tenant's prompt",
    "Scrubbed pages are zero before reuse, and",
    "The isolation contract says that one tenant's prompt must never",  # shares a prefix with the first
    "A",
    "Paged attention reads each row's own block table " * 2,  # longer than one prefill chunk
]


def _run(runtime: str, **kw: object) -> tuple[list[list[int]], LLM]:
    llm = LLM(runtime=runtime, device="cpu", **kw)  # type: ignore[arg-type]
    params = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    acme = TenantIdentity(organization="acme")
    first = llm.generate(PROMPTS, params, tenant=acme)
    again = llm.generate(PROMPTS[:3], params, tenant=acme)  # prefix-cache hits
    return [o.token_ids for o in first + again], llm


@pytest.mark.parametrize("pool", [
    {"kv_cache_tokens": 4096, "max_prefill_chunk": 16, "max_num_batched_tokens": 48},
    {"kv_cache_tokens": 160, "max_model_len": 128, "prefix_cache_tokens": 0, "max_num_batched_tokens": 64},
], ids=["chunked", "preempting"])
def test_greedy_tokens_equal_the_torch_runtimes(pool: dict[str, int]) -> None:
    got, native = _run("native", **pool)
    want, torch_llm = _run("torch", **pool)
    assert got == want
    for llm in (native, torch_llm):
        assert llm.engine.core.pool_is_zero()
    if "max_prefill_chunk" in pool:
        hits = native.engine.core.stats().prefix_hit_tokens_by_scope
        assert sum(hits.values()) > 0  # the second round reused pages
    else:
        assert native.engine.core.stats().num_preemptions > 0


def _prompt_scores(runtime: str) -> tuple[list[CompletionOutput], LLM, int]:
    llm = LLM(runtime=runtime, device="cpu", kv_cache_tokens=4096, max_prefill_chunk=16,  # type: ignore[arg-type]
              max_num_batched_tokens=48)
    acme = TenantIdentity(organization="acme")
    plain = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    llm.generate(PROMPTS, plain, tenant=acme)
    hits = sum(llm.engine.core.stats().prefix_hit_tokens_by_scope.values())
    scored = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True, prompt_logprobs=2)
    # in one batch with prefix-cache hits (the plain ones; a scored prompt computes every position)
    outs = llm.generate(PROMPTS + PROMPTS[:3], [scored] * len(PROMPTS) + [plain] * 3, tenant=acme)
    return outs, llm, sum(llm.engine.core.stats().prefix_hit_tokens_by_scope.values()) - hits


def test_prompt_logprobs_equal_the_torch_runtimes() -> None:
    got, native, hits = _prompt_scores("native")
    want, _, _ = _prompt_scores("torch")
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert hits > 0  # the plain prompts of the scored batch mapped cached pages
    assert native.engine.core.pool_is_zero()
    longest = max(len(o.prompt_token_ids) for o in got)
    assert longest > 16  # scored across prefill chunks
    for g, w in zip(got[: len(PROMPTS)], want[: len(PROMPTS)], strict=True):
        assert g.prompt_logprobs is not None and w.prompt_logprobs is not None
        assert len(g.prompt_logprobs) == len(w.prompt_logprobs) == len(g.prompt_token_ids)
        assert g.prompt_logprobs[0] is None and w.prompt_logprobs[0] is None
        for g_entry, w_entry in zip(g.prompt_logprobs[1:], w.prompt_logprobs[1:], strict=True):
            assert g_entry is not None and w_entry is not None
            assert list(g_entry) == list(w_entry)  # the prompt's token, then the top ids in order
            assert [lp.rank for lp in g_entry.values()] == [lp.rank for lp in w_entry.values()]
            np.testing.assert_allclose([lp.logprob for lp in g_entry.values()],
                                       [lp.logprob for lp in w_entry.values()], rtol=1e-4, atol=1e-4)
    assert all(o.prompt_logprobs is None for o in got[len(PROMPTS):])


@pytest.mark.parametrize("rope", [
    {"rope_type": "dynamic", "factor": 4.0},  # past max_position_embeddings (32): rotated for each length
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
], ids=["dynamic", "yarn"])
def test_scaled_rope_gives_the_torch_runtimes_tokens(rope: dict[str, object], tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "m", "llama", max_position_embeddings=32,
                                 rope_parameters={"rope_theta": 10000.0, **rope})
    rng = np.random.default_rng(5)
    prompts = [rng.integers(3, 250, n).tolist() for n in (20, 29, 45)]  # under, across and past 32 tokens
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)

    def tokens(runtime: str) -> list[list[int]]:
        llm = LLM(model=str(model_dir), runtime=runtime, device="cpu", max_model_len=128,  # type: ignore[arg-type]
                  kv_cache_tokens=1024, page_size=8, max_prefill_chunk=7, max_num_batched_tokens=12)
        return [o.token_ids for o in llm.generate(prompts, params)]

    assert tokens("native") == tokens("torch")


def test_what_the_native_runtime_cannot_do_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="CPU only"):
        LLM(runtime="native", device="cuda")
    with pytest.raises(ConfigError, match="runtime must be one of"):
        LLM(runtime="jax")  # type: ignore[arg-type]
