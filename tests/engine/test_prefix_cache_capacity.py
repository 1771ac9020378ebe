"""Sizing the prefix-cache budget at start-up (I3 with I6): defaults, explicit budgets, the flags."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kvfence.cli import cli
from kvfence.engine.cli_options import ENGINE_OPTION_NAMES
from kvfence.engine.config import EngineConfig
from kvfence.engine.kv.capacity import plan_capacity
from kvfence.errors import CapacityError, ConfigError


def _plan(**kwargs: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = {
        "max_position_embeddings": 4096, "kv_bytes_per_token": 1024, "page_size": 16,
        "max_model_len": None, "kv_cache_tokens": None, "kv_cache_memory": None,
        "available_memory": 1 << 30, "max_num_seqs": 8, "scrub": True,
    }
    return plan_capacity(**(base | kwargs))  # type: ignore[arg-type]


def test_default_budget_is_what_one_max_length_request_leaves() -> None:
    cap = _plan(max_model_len=1024, kv_cache_tokens=4096)
    assert (cap.prefix_cache_pages, cap.prefix_cache_scope_pages, cap.prefix_cache_flush_above_pages) == (192, 24, None)


def test_a_tight_pool_caches_half_and_flushes_above_the_other_half() -> None:
    cap = _plan(max_model_len="auto", kv_cache_tokens=1024)  # the pool is one max-length request
    assert cap.max_model_len == 1024  # 'auto' still lowers to the pool
    assert (cap.prefix_cache_pages, cap.prefix_cache_flush_above_pages) == (32, 32)


def test_an_explicit_budget_must_leave_a_max_length_request_room() -> None:
    with pytest.raises(CapacityError) as info:
        _plan(max_model_len=1024, kv_cache_tokens=2048, prefix_cache_tokens=1280)
    message = str(info.value)
    assert "1024" in message and "768" in message and "--prefix-cache-tokens" in message
    ok = _plan(max_model_len=1024, kv_cache_tokens=2048, prefix_cache_tokens=1024)
    assert (ok.prefix_cache_pages, ok.prefix_cache_flush_above_pages) == (64, None)


def test_auto_lowers_the_context_to_what_an_explicit_budget_leaves() -> None:
    cap = _plan(max_model_len="auto", kv_cache_tokens=2048, prefix_cache_tokens=500)  # 31 whole pages
    assert cap.prefix_cache_pages == 31 and cap.max_model_len == 2048 - 31 * 16
    with pytest.raises(CapacityError, match="whole KV pool"):
        _plan(max_model_len="auto", kv_cache_tokens=2048, prefix_cache_tokens=2048)
    with pytest.raises(CapacityError, match="more than the KV pool holds"):
        _plan(max_model_len="auto", kv_cache_tokens=2048, prefix_cache_tokens=4096)


def test_zero_budget_and_scope_quota_bounds() -> None:
    assert _plan(max_model_len=1024, kv_cache_tokens=2048, prefix_cache_tokens=0).prefix_cache_pages == 0
    cap = _plan(max_model_len=1024, kv_cache_tokens=2048, prefix_cache_scope_tokens=160)
    assert cap.prefix_cache_scope_pages == 10
    for scope_tokens in (8, 4096):  # under one page, over the budget
        with pytest.raises(ConfigError, match="prefix-cache-scope-tokens"):
            _plan(max_model_len=1024, kv_cache_tokens=2048, prefix_cache_scope_tokens=scope_tokens)
    with pytest.raises(ConfigError, match="prefix_cache_tokens"):
        EngineConfig(prefix_cache_tokens=-1)


def test_the_flags_are_engine_options() -> None:
    assert {"prefix_cache_tokens", "prefix_cache_scope_tokens", "unsafe_shared_prefix_cache"} <= set(ENGINE_OPTION_NAMES)
    for command in ("generate", "serve"):
        help_text = CliRunner().invoke(cli, [command, "--help"]).output
        for flag in ("--prefix-cache-tokens", "--prefix-cache-scope-tokens", "--unsafe-shared-prefix-cache"):
            assert flag in help_text, (command, flag)
