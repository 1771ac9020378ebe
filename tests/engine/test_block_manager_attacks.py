"""Attacks on the page allocator: cross-tenant prefix reuse, forged cache entries, tampered tables.

Each test tries to make one request read a page it may not read (I1) or stale bytes (I2).
"""

from __future__ import annotations

import logging

import pytest

from kvfence.engine.core.scheduler import Scheduler, SchedulerConfig
from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv.block_manager import BlockManager, PageState, page_hash
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import IsolationViolation
from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key

SECRET = b"server-secret" * 3
ORG_A = compute_scope_key(TenantIdentity("acme"), CacheScope.ORG, SECRET)
ORG_A_OTHER_KEY = compute_scope_key(TenantIdentity("acme", "ws2", "k2"), CacheScope.ORG, SECRET)
ORG_B = compute_scope_key(TenantIdentity("globex"), CacheScope.ORG, SECRET)
PS = 4
SYSTEM_PROMPT = [7, 3, 9, 1, 4, 4, 8, 2, 6, 5, 3, 1]  # 3 full pages


def make_seq(rid: str, tokens: list[int], scope: bytes) -> Sequence:
    return Sequence(rid, tokens, scope, SamplingParams(max_tokens=4))


def prefill(bm: BlockManager, seq: Sequence) -> None:
    bm.allocate(seq)
    seq.num_computed_tokens = seq.num_tokens
    bm.seal(seq)


@pytest.mark.parametrize("suffix", [[], [42], [42, 43, 44, 45]])
def test_same_prompt_from_another_org_gets_zero_cached_tokens(suffix: list[int]) -> None:
    bm = BlockManager(32, PS)
    prompt = SYSTEM_PROMPT + suffix
    prefill(bm, make_seq("victim", prompt, ORG_A))
    attacker = make_seq("attacker", prompt, ORG_B)
    bm.allocate(attacker)
    assert attacker.num_cached_tokens == 0
    assert all(bm.page_info(p).state is PageState.OWNED for p in attacker.block_table)
    assert ORG_B not in bm.prefix_hit_tokens_by_scope


@pytest.mark.parametrize(("suffix", "expected_cached"), [([], 8), ([42], 12), ([42, 43, 44, 45], 12)])
def test_same_org_gets_all_full_pages_except_the_last_token_page(
    suffix: list[int], expected_cached: int
) -> None:
    bm = BlockManager(32, PS)
    prompt = SYSTEM_PROMPT + suffix
    first = make_seq("first", prompt, ORG_A)
    prefill(bm, first)
    # another API key of the same organisation shares under CacheScope.ORG
    assert ORG_A_OTHER_KEY == ORG_A
    second = make_seq("second", prompt, ORG_A_OTHER_KEY)
    bm.allocate(second)
    assert second.num_cached_tokens == expected_cached
    n = expected_cached // PS
    assert second.block_table[:n] == first.block_table[:n]
    assert second.num_tokens - second.num_cached_tokens >= 1  # at least one token is computed
    bm.verify(second)
    assert bm.prefix_hit_tokens_by_scope == {ORG_A: expected_cached}


def test_a_different_earlier_page_breaks_the_chain() -> None:
    bm = BlockManager(32, PS)
    prefill(bm, make_seq("a", [*SYSTEM_PROMPT, 1], ORG_A))
    changed = [0, *SYSTEM_PROMPT[1:], 1]  # only the first token differs; later pages are equal
    probe = make_seq("probe", changed, ORG_A)
    bm.allocate(probe)
    assert probe.num_cached_tokens == 0


def test_forged_cache_entry_with_other_tokens_is_rejected(caplog: pytest.LogCaptureFixture) -> None:
    """A hash collision (simulated by forging the index) never maps a page with other tokens."""
    bm = BlockManager(32, PS)
    victim = make_seq("victim", [*SYSTEM_PROMPT, 1], ORG_A)
    prefill(bm, victim)
    victim_page = victim.block_table[0]
    probe_tokens = [11, 12, 13, 14, 15]
    forged = page_hash(ORG_A, None, probe_tokens[:PS])
    bm._cache[forged] = victim_page  # the probe's hash now "collides" with the victim's page
    probe = make_seq("probe", probe_tokens, ORG_A)
    with caplog.at_level(logging.ERROR):
        bm.allocate(probe)
    assert probe.num_cached_tokens == 0 and victim_page not in probe.block_table
    assert "does not match its hash" in caplog.text


def test_forged_cross_scope_entry_with_equal_tokens_is_rejected() -> None:
    bm = BlockManager(32, PS)
    victim = make_seq("victim", [*SYSTEM_PROMPT, 1], ORG_A)
    prefill(bm, victim)
    # the attacker knows the victim's tokens and makes its own scope's hash point at the page
    bm._cache[page_hash(ORG_B, None, SYSTEM_PROMPT[:PS])] = victim.block_table[0]
    attacker = make_seq("attacker", [*SYSTEM_PROMPT, 1], ORG_B)
    bm.allocate(attacker)
    assert attacker.num_cached_tokens == 0
    assert not set(attacker.block_table) & set(victim.block_table)


def test_forged_entry_with_wrong_parent_is_rejected() -> None:
    bm = BlockManager(32, PS)
    victim = make_seq("victim", [*SYSTEM_PROMPT, 1], ORG_A)
    prefill(bm, victim)
    # page 1 of the victim, offered as page 0 of a probe that starts with the victim's page-1 tokens
    probe_tokens = [*SYSTEM_PROMPT[PS : 2 * PS], 1]
    bm._cache[page_hash(ORG_A, None, probe_tokens[:PS])] = victim.block_table[1]
    probe = make_seq("probe", probe_tokens, ORG_A)
    bm.allocate(probe)
    assert probe.num_cached_tokens == 0


def test_verify_catches_another_requests_page() -> None:
    bm = BlockManager(32, PS)
    a = make_seq("a", [1, 2, 3, 4, 5, 6], ORG_A)
    b = make_seq("b", [1, 2, 3, 4, 5, 6], ORG_A)  # same scope, same tokens, but b wrote nothing
    bm.allocate(a)
    bm.allocate(b)
    b.block_table[0] = a.block_table[0]
    with pytest.raises(IsolationViolation, match=r"I1 violated.*'b'"):
        bm.verify(b)


def test_verify_catches_a_sealed_page_of_another_scope() -> None:
    bm = BlockManager(32, PS)
    victim = make_seq("victim", [*SYSTEM_PROMPT, 1], ORG_A)
    prefill(bm, victim)
    attacker = make_seq("attacker", [*SYSTEM_PROMPT, 1], ORG_B)
    bm.allocate(attacker)
    attacker.block_table[0] = victim.block_table[0]
    with pytest.raises(IsolationViolation, match="same scope: False"):
        bm.verify(attacker)


def test_verify_catches_a_same_scope_sealed_page_with_other_tokens() -> None:
    bm = BlockManager(32, PS)
    victim = make_seq("victim", [*SYSTEM_PROMPT, 1], ORG_A)
    prefill(bm, victim)
    other = make_seq("other", [9, 9, 9, 9, 9], ORG_A)
    bm.allocate(other)
    other.block_table[0] = victim.block_table[1]
    with pytest.raises(IsolationViolation):
        bm.verify(other)


def test_verify_catches_free_and_duplicate_pages() -> None:
    bm = BlockManager(8, PS)
    seq = make_seq("s", list(range(9)), ORG_A)
    bm.allocate(seq)
    free_page = next(p for p in range(8) if bm.page_info(p).state is PageState.FREE)
    seq.block_table[2] = free_page
    with pytest.raises(IsolationViolation):
        bm.verify(seq)
    seq.block_table[2] = seq.block_table[0]
    with pytest.raises(IsolationViolation, match="bad page"):
        bm.verify(seq)


def test_a_same_scope_equal_page_mapped_without_a_reference_is_caught() -> None:
    bm = BlockManager(32, PS)
    first = make_seq("first", [*SYSTEM_PROMPT, 1], ORG_A)
    prefill(bm, first)
    second = make_seq("second", [*SYSTEM_PROMPT, 1], ORG_A)
    bm.allocate(second)
    assert second.block_table[:3] == first.block_table[:3]
    second.block_table[3] = first.block_table[3]  # first's own tail page: not sealed (5th token)
    with pytest.raises(IsolationViolation, match="owner 'first'"):
        bm.verify(second)


def test_tampered_block_table_cannot_free_foreign_pages(caplog: pytest.LogCaptureFixture) -> None:
    """Release follows the ledger's copy of the table, so an abort after an incident is safe."""
    bm = BlockManager(8, PS)
    a, b = make_seq("a", [1, 2, 3], ORG_A), make_seq("b", [1, 2, 3], ORG_B)
    bm.allocate(a)
    bm.allocate(b)
    b_real = list(b.block_table)
    b.block_table = list(a.block_table)
    with caplog.at_level(logging.ERROR):
        bm.deallocate(b)
    assert "differs from the ledger" in caplog.text
    assert bm.held_pages("b") == [] and bm.held_pages("a") == a.block_table
    assert b.block_table == []
    assert all(bm.page_info(p).owner == "a" for p in a.block_table)
    assert all(bm.page_info(p).state is PageState.FREE for p in b_real)
    bm.check_invariants()
    bm.verify(a)
    stranger = make_seq("stranger", [1], ORG_B)
    stranger.block_table = [5]
    bm.deallocate(stranger)  # never allocated: nothing to release, nothing released
    assert stranger.block_table == [] and bm.num_free_pages == 7
    bm.check_invariants()


def test_freed_pages_are_scrubbed_before_another_tenant_maps_them() -> None:
    """I2 end to end through the scheduler: a page B maps was on a scrub list before B's forward."""
    bm = BlockManager(3, PS)
    sched = Scheduler(SchedulerConfig(), bm, max_model_len=12, eos_token_ids=[0])
    a = Sequence("a", [1, 2, 3, 4, 5, 6], ORG_A, SamplingParams(max_tokens=2))
    sched.add(a)
    scrubbed: set[int] = set()
    mapped_by_a: set[int] = set()
    while not a.is_finished:
        out = sched.schedule()
        scrubbed |= set(out.scrub_pages)
        mapped_by_a |= set(a.block_table)
        sched.postprocess(out, {"a": 7})
    b = Sequence("b", [9, 9, 9, 9, 9, 9, 9, 9, 9], ORG_B, SamplingParams(max_tokens=1))
    sched.add(b)
    out = sched.schedule()  # b needs all three pages: a's owned page and a's evicted sealed page
    assert set(b.block_table) == {0, 1, 2}
    for page_id in b.block_table:
        if page_id in mapped_by_a:
            assert page_id in set(out.scrub_pages) | scrubbed, f"page {page_id} reached b unscrubbed"
    assert b.num_cached_tokens == 0


def test_unsafe_no_scrub_switch_hands_over_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        bm = BlockManager(4, PS, scrub=False)
    assert "UNSAFE" in caplog.text and "I2" in caplog.text
    seq = make_seq("s", [1, 2, 3, 4, 5], ORG_A)
    bm.allocate(seq)
    bm.deallocate(seq)
    assert bm.take_scrub_list() == []
