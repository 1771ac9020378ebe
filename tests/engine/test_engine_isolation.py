"""Isolation through the real engine: scoped prefix hits (I1, I5), zeroed pages (I2), paranoid mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.scope import TenantIdentity

PAGE = 16
PROMPT = "Quarterly revenue for ACME Corp is 12.3M; the merger closes on the 14th of May."  # 80 tokens
PARAMS = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
ORG_A = TenantIdentity("org-a", "ws-1", "key-1")
ORG_A_OTHER_KEY = TenantIdentity("org-a", "ws-2", "key-2")
ORG_B = TenantIdentity("org-b", "ws-1", "key-1")


def _llm(model_dir: Path, **kwargs: object) -> LLM:
    options: dict[str, object] = {"kv_cache_tokens": 2048, "max_model_len": "auto", **kwargs}
    return LLM(model=str(model_dir), page_size=PAGE, device="cpu", **options)  # type: ignore[arg-type]


def _full_pages(num_prompt_tokens: int) -> int:
    return ((num_prompt_tokens - 1) // PAGE) * PAGE  # the page with the last prompt token is recomputed


def test_same_prompt_from_two_orgs_shares_nothing(default_model_dir: Path) -> None:
    llm = _llm(default_model_dir)
    first = llm.generate(PROMPT, PARAMS, tenant=ORG_A)[0]
    assert first.num_cached_tokens == 0
    other_org = llm.generate(PROMPT, PARAMS, tenant=ORG_B)[0]
    assert other_org.num_cached_tokens == 0
    assert other_org.token_ids == first.token_ids  # same answer, computed from scratch
    again = llm.generate(PROMPT, PARAMS, tenant=ORG_A_OTHER_KEY)[0]  # same org, other key: org scope shares
    assert again.num_cached_tokens == _full_pages(first.num_prompt_tokens) > 0
    assert again.token_ids == first.token_ids
    hits = llm.engine.stats().prefix_hit_tokens_by_scope
    assert hits == {llm.scope_key(ORG_A): again.num_cached_tokens}


@pytest.mark.parametrize(("scope", "shared"), [("workspace", False), ("key", False), ("request", False), ("global", True)])
def test_narrower_scopes(default_model_dir: Path, scope: str, shared: bool) -> None:
    llm = _llm(default_model_dir, cache_scope=scope)
    first = llm.generate(PROMPT, PARAMS, tenant=ORG_A)[0]
    second = llm.generate(PROMPT, PARAMS, tenant=ORG_A_OTHER_KEY if scope != "request" else ORG_A)[0]
    expected = _full_pages(first.num_prompt_tokens) if shared else 0
    assert second.num_cached_tokens == expected


def test_released_pages_are_zero_before_the_next_request_maps_them(default_model_dir: Path) -> None:
    llm = _llm(default_model_dir, kv_cache_tokens=8 * PAGE)
    engine = llm.engine
    engine.add_request("a", engine.tokenizer.encode(PROMPT), PARAMS, llm.scope_key(ORG_A))
    pages_of_a: set[int] = set()
    finished = False
    while not finished:
        seq = engine.scheduler.get("a")
        if seq is not None:
            pages_of_a |= set(seq.block_table)
        finished = any(o.finished for o in engine.step())
    # A's unsealed pages were zero-filled when it finished; its sealed prefix pages stay cached
    # for org A only (same-scope revival), so the pool is not all zero yet.
    assert engine.free_pages() and engine.pool_is_zero()
    assert not engine.pool_is_zero(sorted(pages_of_a))

    checked: list[list[int]] = []
    model = engine.runner.model
    forward = model.forward

    def check_then_forward(*args, **kwargs):  # type: ignore[no-untyped-def]
        seq = engine.scheduler.get("b")
        if seq is not None and seq.num_computed_tokens == 0:
            checked.append(list(seq.block_table))
            # I2: every page B is about to compute into is zero when B's first forward pass starts
            assert engine.pool_is_zero(seq.block_table)
        return forward(*args, **kwargs)

    model.forward = check_then_forward  # type: ignore[method-assign]
    prompt_b = engine.tokenizer.encode("another tenant's prompt, long enough to need every page " * 2)
    engine.add_request("b", prompt_b, PARAMS, llm.scope_key(ORG_B))
    engine.step()
    assert checked and set(checked[0]) & pages_of_a  # B really reuses (evicted) pages of A
    seq_b = engine.scheduler.get("b")
    assert seq_b is not None and seq_b.num_cached_tokens == 0


def test_request_scope_caches_nothing_and_leaves_the_whole_pool_zero(default_model_dir: Path) -> None:
    # cache_scope=request shares nothing, so its pages must not linger as unreachable cache entries:
    # every page is free and zero as soon as the request ends (I2), not only after a later eviction.
    llm = _llm(default_model_dir, cache_scope="request")
    llm.generate([PROMPT, PROMPT + " again"], PARAMS, tenant=ORG_A)
    engine = llm.engine
    assert engine.block_manager.num_cached_pages == 0
    assert engine.block_manager.num_free_pages == engine.block_manager.num_pages
    assert engine.pool_is_zero()
    assert engine.runner.pages_are_zero(list(range(engine.block_manager.num_pages)))


def test_without_scrubbing_stale_kv_stays_in_the_pool(default_model_dir: Path) -> None:
    # The unsafe benchmark switch: proves the zero check above can fail.
    llm = _llm(default_model_dir, scrub=False, cache_scope="request")
    llm.generate(PROMPT, PARAMS, tenant=ORG_A)
    assert not llm.engine.pool_is_zero()
    assert not llm.engine.capacity.scrub


@pytest.mark.parametrize("tamper", ["append", "replace"])
def test_paranoid_mode_turns_a_foreign_page_into_an_abort(default_model_dir: Path, tamper: str) -> None:
    llm = _llm(default_model_dir, verify_isolation=True, cache_scope="request")
    engine = llm.engine
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    engine.add_request("victim", engine.tokenizer.encode(PROMPT), params, llm.scope_key(ORG_A))
    engine.add_request("attacker", engine.tokenizer.encode("hello " * 10), params, llm.scope_key(ORG_B))
    engine.step()
    engine.step()
    victim, attacker = engine.scheduler.get("victim"), engine.scheduler.get("attacker")
    assert victim is not None and attacker is not None
    # a bookkeeping bug maps the victim's page into the attacker's table
    if tamper == "append":
        attacker.block_table.append(victim.block_table[0])
    else:
        attacker.block_table[0] = victim.block_table[0]
    outputs = {o.request_id: o for o in engine.step()}
    assert outputs["attacker"].finished and outputs["attacker"].finish_reason == "abort"
    assert outputs["attacker"].new_token_ids == []
    assert engine.stats().isolation_incidents == 1
    results = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            results[o.request_id] = o
    assert results["victim"].finish_reason == "length" and len(results["victim"].token_ids) == 20
    assert "attacker" not in results
    engine.block_manager.check_invariants()
    assert engine.pool_is_zero()
