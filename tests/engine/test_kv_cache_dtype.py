"""``kv_cache_dtype``: a bfloat16 / float16 KV pool under a float32 model.

What it promises: half the pool bytes per token; attention computes in float32 over K/V rounded to
the pool dtype, everywhere (prefill and decode, kernel and torch), so recompute after preemption and
prefix-cache hits give the same tokens as one uninterrupted run; scrubbing (I2) still zero-fills;
next-token log-probabilities stay close to a float32 pool's (the rounding is the only difference).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvfence.engine.config import EngineConfig
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ConfigError
from tests.engine.tiny_models import build_tiny_model

HALF = ["bfloat16", "float16"]
# Largest difference of a next-token log-probability from the float32 pool's, per pool dtype
# (8 and 11 significant bits of K/V; measured on this tiny model: 1.7e-4 and 1.9e-5).
LOGPROB_TOL = {"bfloat16": 2e-3, "float16": 2e-4}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("kvdtype"), "llama")


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 23, 41, 30)]
    prompts.append(prompts[2] + torch.randint(0, 256, (9,), generator=g).tolist())  # shares a prefix
    return prompts


def _engine(model_dir: Path, kv_cache_dtype: str, **kwargs: object) -> LLMEngine:
    options: dict[str, object] = {"kv_cache_tokens": 4096, "page_size": 8, "device": "cpu"} | kwargs
    return LLMEngine(EngineConfig(model=str(model_dir), kv_cache_dtype=kv_cache_dtype, **options))  # type: ignore[arg-type]


def _generate(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams, tag: str = "") -> list[list[int]]:
    for i, prompt in enumerate(prompts):
        engine.add_request(f"{tag}{i}", prompt, params, b"scope")
    done: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.token_ids
    return [done[f"{tag}{i}"] for i in range(len(prompts))]


def test_pool_dtype_and_bytes(model_dir: Path) -> None:
    full = _engine(model_dir, "auto")
    assert full.runner.kv_pool.dtype == torch.float32
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        half = _engine(model_dir, name)
        assert half.runner.kv_pool.dtype == dtype
        assert half.runner.pool_bytes * 2 == full.runner.pool_bytes
    # A memory budget holds twice the pages in a 2-byte pool.
    budget = 1 << 20
    assert _engine(model_dir, "bfloat16", kv_cache_tokens=None, kv_cache_memory=budget, max_model_len="auto").capacity.num_pages == (
        2 * _engine(model_dir, "float32", kv_cache_tokens=None, kv_cache_memory=budget, max_model_len="auto").capacity.num_pages
    )


def test_bad_kv_cache_dtype_is_rejected() -> None:
    with pytest.raises(ConfigError, match="kv_cache_dtype must be one of auto, float32, bfloat16, float16"):
        EngineConfig(kv_cache_dtype="int8")  # type: ignore[arg-type]


@pytest.mark.parametrize("kv_cache_dtype", HALF)
def test_recompute_and_cache_hits_give_the_same_tokens(model_dir: Path, kv_cache_dtype: str) -> None:
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    prompts = _prompts()
    roomy = _engine(model_dir, kv_cache_dtype)
    reference = _generate(roomy, prompts, params)
    assert _generate(roomy, prompts, params, tag="again-") == reference  # served partly from the prefix cache
    tiny = _engine(model_dir, kv_cache_dtype, kv_cache_tokens=96, max_model_len="auto")
    assert _generate(tiny, prompts, params) == reference
    assert tiny.stats().num_preemptions > 0
    assert tiny.pool_is_zero()  # I2: released pages zero-filled in the 2-byte pool too
    chunked = _engine(model_dir, kv_cache_dtype, max_prefill_chunk=7, max_num_batched_tokens=12, max_num_seqs=3)
    assert _generate(chunked, prompts, params) == reference


@pytest.mark.parametrize("kv_cache_dtype", HALF)
def test_logprobs_stay_close_to_a_float32_pool(model_dir: Path, kv_cache_dtype: str) -> None:
    # The float32 pool's greedy continuation, then each engine scores the same text position by
    # position (prompt = prompt + continuation so far, one token, log-probabilities of the top 5).
    prompt = _prompts()[2]
    continuation = _generate(_engine(model_dir, "float32"), [prompt], SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True))[0]
    scored = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, logprobs=5)
    contexts = [prompt + continuation[:i] for i in range(len(continuation))]
    worst = 0.0
    outs = {}
    for name in ("float32", kv_cache_dtype):
        engine = _engine(model_dir, name)
        outs[name] = []
        for i, context in enumerate(contexts):
            engine.add_request(f"{name}{i}", context, scored, b"scope")
            while engine.has_unfinished_requests():
                for out in engine.step():
                    if out.finished:
                        assert out.logprobs is not None
                        outs[name].append(out.logprobs[0])
    for full, half in zip(outs["float32"], outs[kv_cache_dtype], strict=True):
        for token, lp in full.items():
            if token in half:
                worst = max(worst, abs(half[token] - lp))
    assert 0.0 < worst < LOGPROB_TOL[kv_cache_dtype]
