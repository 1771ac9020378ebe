"""Admission (I3): the engine refuses to advertise more context than its pool holds, and rejects
over-length requests before anything is allocated."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfence.engine.config import EngineConfig
from kvfence.engine.kv.capacity import plan_capacity
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import CapacityError, ConfigError, ContextLengthExceededError, InvalidParameterError

KV_BYTES = 1024


def _plan(**kwargs: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = {
        "max_position_embeddings": 4096, "kv_bytes_per_token": KV_BYTES, "page_size": 16,
        "max_model_len": None, "kv_cache_tokens": None, "kv_cache_memory": None,
        "available_memory": 1 << 30, "max_num_seqs": 8, "scrub": True,
    }
    return plan_capacity(**(base | kwargs))  # type: ignore[arg-type]


def test_oversized_max_model_len_is_refused_with_both_numbers() -> None:
    with pytest.raises(CapacityError) as info:
        _plan(max_model_len=4096, kv_cache_tokens=1000)
    message = str(info.value)
    assert "4096" in message and "1008" in message  # 1000 tokens round up to 63 pages of 16
    assert "--max-model-len auto" in message and "--kv-cache-tokens" in message
    assert info.value.exit_code == 2


def test_model_default_length_is_checked_too() -> None:
    with pytest.raises(CapacityError, match="max_position_embeddings is 4096"):
        _plan(kv_cache_memory=100 * 16 * KV_BYTES)


def test_auto_lowers_to_the_pool() -> None:
    cap = _plan(max_model_len="auto", kv_cache_tokens=1000)
    assert (cap.max_model_len, cap.pool_tokens, cap.num_pages) == (1008, 1008, 63)
    assert _plan(max_model_len="auto", kv_cache_tokens=10_000).max_model_len == 4096


def test_default_pool_holds_max_num_seqs_full_requests_within_memory() -> None:
    cap = _plan()
    assert cap.pool_tokens == 8 * 4096 and cap.max_model_len == 4096
    small = _plan(available_memory=2048 * KV_BYTES, max_model_len="auto")
    assert small.pool_tokens == 2048 and small.max_model_len == 2048


def test_beyond_trained_positions_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="max_position_embeddings=4096"):
        _plan(max_model_len=8192, kv_cache_tokens=100_000)


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_model_len", 0), ("max_model_len", "big"), ("page_size", 0), ("kv_cache_tokens", -1), ("dtype", "int8"), ("device", "tpu")],
)
def test_engine_config_is_validated(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field if field != "dtype" else "dtype"):
        EngineConfig(**{field: value})  # type: ignore[arg-type]


def test_engine_refuses_to_start_and_auto_fits(default_model_dir: Path) -> None:
    with pytest.raises(CapacityError, match="4096 tokens but the KV pool holds only 512"):
        LLM(model=str(default_model_dir), kv_cache_tokens=512, device="cpu")
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=512, max_model_len="auto", device="cpu")
    assert llm.engine.capacity.max_model_len == 512


def test_over_length_request_is_rejected_before_allocation(default_model_dir: Path) -> None:
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=512, max_model_len=256, device="cpu")
    engine = llm.engine
    prompt = [65] * 200
    with pytest.raises(ContextLengthExceededError) as info:
        engine.add_request("long", prompt, SamplingParams(max_tokens=57), b"scope")
    assert "256" in str(info.value) and "257" in str(info.value)
    assert info.value.status_code == 400
    stats = engine.stats()
    assert (stats.num_used_pages, stats.num_waiting, stats.num_running) == (0, 0, 0)
    assert not engine.has_unfinished_requests()
    # exactly at the limit is fine
    engine.add_request("fits", prompt, SamplingParams(max_tokens=56, temperature=0), b"scope")
    with pytest.raises(InvalidParameterError, match="already in use"):
        engine.add_request("fits", prompt, SamplingParams(max_tokens=1), b"scope")
    with pytest.raises(ContextLengthExceededError):
        llm.generate([[65] * 10, prompt], SamplingParams(max_tokens=100))
    assert engine.stats().num_waiting == 1  # only "fits"; nothing of the rejected batch was queued


def test_bad_prompt_tokens_are_rejected(default_model_dir: Path) -> None:
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=512, max_model_len="auto", device="cpu")
    with pytest.raises(InvalidParameterError, match="outside the vocabulary"):
        llm.engine.add_request("x", [1, 10**6], SamplingParams(), b"s")
    with pytest.raises(InvalidParameterError, match="at least one token"):
        llm.engine.add_request("y", [], SamplingParams(), b"s")
