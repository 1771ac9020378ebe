"""The whole engine on the native runtime answers as on the torch runtime (greedy, float32).

``LLM(runtime="native")`` and ``LLM(runtime="torch")`` over the same checkpoint and pool run the
same continuous batches: mixed prefill and decode steps, prompts chunked across steps, prefix-cache
hits of one tenant, and a pool so small that requests are preempted and recomputed. Their greedy
tokens must be equal, and every freed page zero afterwards (I2), in both.
"""

from __future__ import annotations

import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ConfigError, InvalidParameterError
from kvfence.scope import TenantIdentity

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


def test_what_the_native_runtime_cannot_do_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="CPU only"):
        LLM(runtime="native", device="cuda")
    with pytest.raises(ConfigError, match="runtime must be one of"):
        LLM(runtime="jax")  # type: ignore[arg-type]
    llm = LLM(runtime="native", kv_cache_tokens=512, max_model_len=256)
    with pytest.raises(InvalidParameterError, match="prompt_logprobs"):
        llm.generate(["x"], SamplingParams(max_tokens=1, prompt_logprobs=1))
    assert llm.generate(["still works"], SamplingParams(max_tokens=2, temperature=0))[0].token_ids
