"""Block manager: allocation, prefix cache per scope (I1), scrub list (I2), ledger checks."""

from __future__ import annotations

import logging

import pytest

from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv.block_manager import BlockManager, PageState, page_hash
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import CapacityError, ConfigError, IsolationViolation

ORG_A = b"A" * 32
ORG_B = b"B" * 32
PS = 4


def make_seq(rid: str, tokens: list[int], scope: bytes = ORG_A, max_tokens: int = 4) -> Sequence:
    return Sequence(rid, tokens, scope, SamplingParams(max_tokens=max_tokens))


def run_prefill(bm: BlockManager, seq: Sequence) -> None:
    """What the engine does after the forward pass over the whole prompt."""
    bm.allocate(seq)
    bm.take_scrub_list()
    seq.num_computed_tokens = seq.num_tokens
    bm.seal(seq)


def test_rejects_bad_geometry() -> None:
    with pytest.raises(ConfigError):
        BlockManager(0, 16)
    with pytest.raises(ConfigError):
        BlockManager(4, 0)


def test_pages_needed_rounds_up() -> None:
    bm = BlockManager(8, PS)
    assert [bm.pages_needed(n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_allocate_and_deallocate_fresh_pages() -> None:
    bm = BlockManager(8, PS)
    seq = make_seq("r1", list(range(10)))
    assert bm.can_allocate(seq)
    bm.allocate(seq)
    assert len(seq.block_table) == 3 and len(set(seq.block_table)) == 3
    assert seq.num_cached_tokens == 0 == seq.num_computed_tokens
    assert bm.num_free_pages == 5 and bm.num_used_pages == 3
    for p in seq.block_table:
        info = bm.page_info(p)
        assert info.state is PageState.OWNED and info.owner == "r1" and info.ref_count == 1
    bm.verify(seq)
    bm.check_invariants()
    pages = list(seq.block_table)
    gens = [bm.page_info(p).generation for p in pages]
    bm.deallocate(seq)
    assert seq.block_table == []
    assert bm.num_free_pages == 8
    assert sorted(bm.take_scrub_list()) == sorted(pages)
    assert bm.take_scrub_list() == []
    assert [bm.page_info(p).generation for p in pages] == [g + 1 for g in gens]
    bm.check_invariants()


def test_same_scope_hits_all_full_pages_except_the_last_token_page() -> None:
    bm = BlockManager(16, PS)
    prompt = list(range(100, 112))  # exactly 3 pages: the third holds the last token
    first = make_seq("a1", prompt)
    run_prefill(bm, first)
    second = make_seq("a2", prompt)
    bm.allocate(second)
    assert second.num_cached_tokens == 8 == second.num_computed_tokens
    assert second.block_table[:2] == first.block_table[:2]
    assert second.block_table[2] != first.block_table[2]
    assert bm.page_info(first.block_table[0]).ref_count == 2
    assert bm.prefix_hit_tokens_by_scope == {ORG_A: 8}
    bm.verify(second)
    bm.check_invariants()


def test_other_scope_gets_zero_cached_tokens() -> None:
    bm = BlockManager(16, PS)
    prompt = list(range(13))
    run_prefill(bm, make_seq("a1", prompt, ORG_A))
    other = make_seq("b1", prompt, ORG_B)
    bm.allocate(other)
    assert other.num_cached_tokens == 0
    assert bm.prefix_hit_tokens_by_scope == {}
    assert not set(other.block_table) & {p for p in range(16) if bm.page_info(p).state is PageState.CACHED}


def test_pages_are_sealed_only_after_their_kv_is_computed() -> None:
    bm = BlockManager(16, PS)
    prompt = list(range(13))
    a = make_seq("a1", prompt)
    b = make_seq("a2", prompt)
    bm.allocate(a)
    bm.allocate(b)  # same step, nothing written yet: b must not read a's pages
    assert b.num_cached_tokens == 0
    assert not set(a.block_table) & set(b.block_table)
    a.num_computed_tokens = 5  # a chunk of 5 tokens was written: only page 0 is full and computed
    bm.seal(a)
    assert bm.page_info(a.block_table[0]).state is PageState.CACHED
    assert bm.page_info(a.block_table[1]).state is PageState.OWNED
    c = make_seq("a3", prompt)
    bm.allocate(c)
    assert c.num_cached_tokens == PS and c.block_table[0] == a.block_table[0]
    bm.check_invariants()


def test_seal_is_idempotent_and_duplicate_content_stays_owned() -> None:
    bm = BlockManager(16, PS)
    prompt = list(range(9))
    a, b = make_seq("a1", prompt), make_seq("a2", prompt)
    bm.allocate(a)
    bm.allocate(b)
    for s in (a, b):
        s.num_computed_tokens = s.num_tokens
        bm.seal(s)
        bm.seal(s)
    assert bm.num_cached_pages == 2  # a's two full pages; b computed the same, keeps its own
    assert all(bm.page_info(p).state is PageState.OWNED for p in b.block_table)
    bm.check_invariants()
    b_pages = list(b.block_table)
    bm.take_scrub_list()
    bm.deallocate(b)
    assert sorted(bm.take_scrub_list()) == sorted(b_pages)  # owned duplicates are scrubbed
    bm.check_invariants()


def test_released_sealed_pages_are_revived_by_same_scope_without_scrub() -> None:
    bm = BlockManager(8, PS)
    prompt = list(range(9))
    a = make_seq("a1", prompt)
    run_prefill(bm, a)
    cached = a.block_table[:2]
    owned_tail = a.block_table[2]
    bm.deallocate(a)
    assert bm.take_scrub_list() == [owned_tail]  # sealed pages keep their KV in the LRU
    assert bm.num_free_pages == 8 and bm.num_cached_pages == 2
    again = make_seq("a2", prompt)
    bm.allocate(again)
    assert again.block_table[:2] == cached and again.num_cached_tokens == 8
    assert cached[0] not in bm.take_scrub_list()
    bm.check_invariants()


def test_lru_eviction_scrubs_and_bumps_generation() -> None:
    bm = BlockManager(3, PS)
    a = make_seq("a1", list(range(9)))
    run_prefill(bm, a)
    cached = a.block_table[:2]
    bm.deallocate(a)
    bm.take_scrub_list()
    gen = {p: bm.page_info(p).generation for p in cached}
    b = make_seq("b1", list(range(50, 61)))  # same scope, 3 other pages: evicts both cached pages
    bm.allocate(b)
    assert set(cached) <= set(b.block_table)
    assert set(cached) <= set(bm.take_scrub_list())
    assert all(bm.page_info(p).generation == gen[p] + 1 for p in cached)
    assert bm.num_cached_pages == 0
    bm.verify(b)
    bm.check_invariants()


def test_another_scopes_request_never_evicts_my_parked_pages() -> None:
    """I6: a request waits rather than take another scope's parked pages (it cannot: no room)."""
    bm = BlockManager(3, PS)
    a = make_seq("a1", list(range(9)))
    run_prefill(bm, a)
    cached = a.block_table[:2]
    bm.deallocate(a)
    b = make_seq("b1", list(range(50, 61)), ORG_B)  # 3 pages; only 1 is free, 2 are A's
    assert bm.num_available_pages(ORG_B) == 1 and bm.num_available_pages(ORG_A) == 3
    assert not bm.can_allocate(b)
    with pytest.raises(CapacityError):
        bm.allocate(b)
    assert bm.parked_pages() == {ORG_A: cached[::-1]}  # released tail first: the tail goes first
    bm.check_invariants()


def test_reserve_shrinks_a_default_budget_and_refuses_a_chosen_one() -> None:
    bm = BlockManager(8, PS)
    assert bm.cache_pages == 8
    bm.reserve(3)
    assert (bm.cache_pages, bm.flush_above_pages) == (5, None)
    tight = BlockManager(8, PS)
    tight.reserve(5)  # less than half the pool left: half of it caches, longer requests flush it
    assert (tight.cache_pages, tight.flush_above_pages) == (4, 4)
    with pytest.raises(ConfigError, match="at most 3 pages"):
        BlockManager(8, PS, cache_pages=4).reserve(5)
    BlockManager(8, PS, cache_pages=3).reserve(5)


def test_capacity_error_changes_nothing() -> None:
    bm = BlockManager(2, PS)
    seq = make_seq("big", list(range(9)))
    assert not bm.can_allocate(seq)
    with pytest.raises(CapacityError):
        bm.allocate(seq)
    assert bm.num_free_pages == 2 and seq.block_table == []
    bm.check_invariants()


def test_may_append_adds_a_page_at_the_page_boundary() -> None:
    bm = BlockManager(4, PS)
    seq = make_seq("r", list(range(4)))
    run_prefill(bm, seq)
    seq.append_token(7)
    assert bm.can_append(seq)
    bm.may_append(seq)
    assert len(seq.block_table) == 2
    bm.may_append(seq)  # nothing more needed
    assert len(seq.block_table) == 2
    bm.check_invariants()


def test_scrub_off_returns_empty_list_and_warns_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        bm = BlockManager(4, PS, scrub=False)
    assert "UNSAFE" in caplog.text
    seq = make_seq("r", list(range(6)))
    bm.allocate(seq)
    bm.deallocate(seq)
    assert bm.take_scrub_list() == []


def test_page_hash_separates_scope_parent_and_tokens() -> None:
    base = page_hash(ORG_A, None, [1, 2, 3, 4])
    assert base != page_hash(ORG_B, None, [1, 2, 3, 4])
    assert base != page_hash(ORG_A, b"\x00" * 32, [1, 2, 3, 4])
    assert base != page_hash(ORG_A, None, [1, 2, 3, 5])
    assert page_hash(b"ab", None, [1]) != page_hash(b"a", None, [ord("b"), 1])
    assert base == page_hash(ORG_A, None, (1, 2, 3, 4))


def test_verify_catches_a_foreign_page() -> None:
    bm = BlockManager(8, PS)
    a, b = make_seq("a1", list(range(6))), make_seq("b1", list(range(6)), ORG_B)
    bm.allocate(a)
    bm.allocate(b)
    a.block_table[1] = b.block_table[1]
    with pytest.raises(IsolationViolation, match="I1"):
        bm.verify(a)
    bm.check_invariants()  # the ledger keeps its own copy of each table: it is not corrupted


def test_ledger_block_table_drops_foreign_pages_and_recovers_lost_own_ones() -> None:
    """After an I1 violation the release goes through the ledger's table: a foreign page the
    corrupted table names is never released, and an own page it lost is not leaked."""
    bm = BlockManager(16, PS)
    prompt = list(range(100, 112))
    run_prefill(bm, make_seq("a1", prompt, ORG_A))
    victim = make_seq("b1", list(range(200, 210)), ORG_B)
    run_prefill(bm, victim)
    seq = make_seq("a2", prompt, ORG_A)
    bm.allocate(seq)  # two same-scope cached pages, then one of its own
    cached, own = seq.block_table[:2], seq.block_table[2]
    foreign = victim.block_table[0]
    seq.block_table = [cached[0], foreign, cached[1], 99, cached[0]]  # own page lost, foreign and junk added
    with pytest.raises(IsolationViolation):
        bm.verify(seq)
    assert bm.ledger_block_table(seq) == [cached[0], cached[1], own]
    seq.block_table = bm.ledger_block_table(seq)
    bm.deallocate(seq)
    bm.verify(victim)  # the victim still holds its page
    assert bm.page_info(own).state is not PageState.OWNED
    bm.check_invariants()
