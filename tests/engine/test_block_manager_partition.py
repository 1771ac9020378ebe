"""Attacks on the prefix-cache partition (I6): nothing another scope asks for moves my parked pages.

The probe in every test is what a tenant can observe: how many tokens of its own prompt come back
as cached (``num_cached_tokens``; the time to first token follows it). Each attack is also run
against the unsafe shared LRU, to show that the same probe does see the victim there.
"""

from __future__ import annotations

import logging
import random

import pytest

from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv.block_manager import BlockManager
from kvfence.engine.kv.cache_partition import ScopedPrefixCache
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ConfigError
from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key

PS = 4
ATTACKER = b"B" * 32
VICTIM = b"A" * 32
POOL = 16
MAX_LEN = 32  # tokens: 8 pages, so the default budget is the other 8 pages
PRIMES = [[(7 * i + k) % 11 + 1 for i in range(29)] for k in range(2)]  # 7 full pages and one token each


def run(bm: BlockManager, rid: str, tokens: list[int], scope: bytes) -> int:
    """One request start to end (allocate, compute, seal, release); returns its cached tokens."""
    seq = Sequence(rid, tokens, scope, SamplingParams(max_tokens=1))
    bm.allocate(seq)
    seq.num_computed_tokens = seq.num_tokens
    bm.seal(seq)
    bm.deallocate(seq)
    bm.check_invariants()
    return seq.num_cached_tokens


def probe_after_victim(bm: BlockManager, victim_len: int) -> tuple[int, ...]:
    """B caches two prompts, A sends ``victim_len`` tokens, B resends both: B's parked pages and hits."""
    for k, prime in enumerate(PRIMES):
        run(bm, f"prime{k}", prime, ATTACKER)
    run(bm, "victim", [200 + i % 50 for i in range(victim_len)], VICTIM)
    parked = tuple(bm.parked_pages().get(ATTACKER, []))
    # newest first: under the shared LRU the oldest prompt is what a victim evicts; probing it
    # last keeps the newer probe from evicting it first
    return (*parked, -1, *(run(bm, f"probe{k}", PRIMES[k], ATTACKER) for k in (1, 0)))


def safe_manager() -> BlockManager:
    bm = BlockManager(POOL, PS)
    bm.reserve(-(-MAX_LEN // PS))  # what the scheduler does with its max_model_len
    return bm


def test_a_victim_of_every_length_leaves_the_same_trace() -> None:
    bm = safe_manager()
    assert bm.cache_pages == 8 and bm.flush_above_pages is None
    results = {probe_after_victim(safe_manager(), n) for n in range(1, MAX_LEN)}  # + 1 token to sample
    assert len(results) == 1
    (trace,) = results
    assert trace[-2:] == (4 * PS, 0)  # the budget split between two scopes: B keeps 4 pages, its newest


def test_the_same_probe_sees_the_victim_through_the_unsafe_shared_lru(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        BlockManager(POOL, PS, unsafe_shared_prefix_cache=True)
    assert "UNSAFE" in caplog.text and "I6" in caplog.text
    hits = {n: probe_after_victim(BlockManager(POOL, PS, unsafe_shared_prefix_cache=True), n)[-1]
            for n in range(1, MAX_LEN)}
    assert hits[1] == 7 * PS and hits[MAX_LEN - 1] < hits[1]  # the long victim evicted B's oldest pages
    assert len(set(hits.values())) > 4  # ... in proportion to its length


def test_a_victim_of_every_length_up_to_the_pool_in_any_pool() -> None:
    """Every pool from 2 to 24 pages, every max_model_len, every victim length under the flush line."""
    for pool in range(2, 25):
        for max_pages in range(1, pool + 1):
            traces = set()
            prime = [(5 * i) % 7 + 1 for i in range(max_pages * PS - 1)]
            for victim_len in range(1, max_pages * PS):
                bm = BlockManager(pool, PS)
                bm.reserve(max_pages)
                if bm.flush_above_pages is not None and bm.pages_needed(victim_len + 1) > bm.flush_above_pages:
                    continue  # a tight pool: an over-long request flushes everything (its own test)
                assert bm.cache_pages + (bm.flush_above_pages or max_pages) <= pool
                for k in range(3):
                    run(bm, f"prime{k}", [t + k for t in prime], ATTACKER)
                run(bm, "victim", [99] * victim_len, VICTIM)
                traces.add((tuple(bm.parked_pages().get(ATTACKER, [])), run(bm, "probe", prime, ATTACKER)))
            assert len(traces) <= 1, (pool, max_pages, traces)


def test_a_tight_pool_caches_half_and_an_over_long_request_flushes_every_scope() -> None:
    bm = BlockManager(8, PS)
    bm.reserve(8)  # a pool that holds exactly one max_model_len request
    assert (bm.cache_pages, bm.flush_above_pages) == (4, 4)
    run(bm, "b", list(range(1, 10)), ATTACKER)
    assert run(bm, "b-again", list(range(1, 10)), ATTACKER) == 2 * PS  # the cache works
    run(bm, "a-short", [50] * 15, VICTIM)  # 16 tokens with the sampled one: 4 pages, not over the line
    assert len(bm.parked_pages()[ATTACKER]) == 2
    long = Sequence("a-long", [60] * 20, VICTIM, SamplingParams(max_tokens=8))  # may grow to 7 pages
    assert bm.flushes_cache(long) and bm.can_allocate(long)
    bm.allocate(long)
    assert bm.num_parked_pages == 0 and bm.num_cache_flushes == 1
    run(bm, "b-while", list(range(1, 10)), ATTACKER)
    assert bm.num_parked_pages == 0  # nothing parks while it may still need the whole pool
    long.num_computed_tokens = long.num_tokens
    bm.seal(long)
    long_pages = set(long.block_table)
    bm.deallocate(long)  # its own sealed pages park as it ends (it no longer needs the pool)
    assert set(bm.parked_pages()[VICTIM]) <= long_pages and len(bm.parked_pages()[VICTIM]) == 2
    assert run(bm, "b-after", list(range(1, 10)), ATTACKER) == 0
    assert run(bm, "b-after2", list(range(1, 10)), ATTACKER) == 2 * PS


def flood(lengths: list[int]) -> list[int]:
    """B parks 5 pages, then one request from each of ``len(lengths)`` minted scopes: B's parked counts."""
    bm = BlockManager(64, PS, cache_pages=32, scope_pages=4)
    run(bm, "b", list(range(1, 22)), ATTACKER)
    seen = []
    for i, n in enumerate(lengths):
        minted = f"salt-{i}".encode().ljust(32, b".")
        run(bm, f"m{i}", [1 + (i + j) % 9 for j in range(n)], minted)
        parked = bm.parked_pages()
        assert bm.num_parked_pages <= 32 and len(parked) <= 8
        assert all(len(pages) <= max(4, 32 // len(parked)) for pages in parked.values())
        seen.append(len(parked.get(ATTACKER, [])))
    return seen


def test_a_flood_of_minted_scopes_costs_me_the_same_whatever_their_lengths() -> None:
    rng = random.Random(6)
    short = flood([1] * 40)
    assert flood([rng.randint(1, 128) for _ in range(40)]) == short == flood([128] * 40)
    # shares shrink as scopes arrive (32 // holders, B keeps at most what it had); the 8th minted
    # scope finds 8 holders and pushes out the least recently admitted one: B, whole
    assert short[:8] == [5, 5, 5, 5, 5, 4, 4, 0] and set(short[8:]) == {0}


def test_the_least_recently_admitted_scope_leaves_first() -> None:
    bm = BlockManager(32, PS, cache_pages=8, scope_pages=4)  # two scopes at a time
    c = b"C" * 32
    run(bm, "b1", list(range(1, 10)), ATTACKER)
    run(bm, "a1", list(range(1, 10)), VICTIM)
    run(bm, "b2", list(range(1, 10)), ATTACKER)  # B is now the most recently admitted
    run(bm, "c1", list(range(1, 10)), c)
    assert set(bm.parked_pages()) == {ATTACKER, c}
    assert run(bm, "b3", list(range(1, 10)), ATTACKER) == 8 and run(bm, "a2", list(range(1, 10)), VICTIM) == 0


def test_a_scope_at_its_quota_evicts_only_its_own_oldest_pages() -> None:
    bm = BlockManager(32, PS, cache_pages=8, scope_pages=4)
    run(bm, "b", list(range(1, 10)), ATTACKER)  # 2 pages parked
    b_pages = bm.parked_pages()[ATTACKER]
    first = list(range(100, 125))  # 6 full pages: A keeps its first 4 (the tail is released first)
    run(bm, "a1", first, VICTIM)
    assert len(bm.parked_pages()[VICTIM]) == 4 and bm.parked_pages()[ATTACKER] == b_pages
    second = list(range(150, 163))  # 3 more full pages of A: A's own least recently used go
    run(bm, "a2", second, VICTIM)
    assert len(bm.parked_pages()[VICTIM]) == 4 and bm.parked_pages()[ATTACKER] == b_pages
    assert run(bm, "a3", second, VICTIM) == 3 * PS
    assert run(bm, "b2", list(range(1, 10)), ATTACKER) == 2 * PS


def test_an_allocation_takes_its_own_parked_pages_but_never_another_scopes() -> None:
    bm = BlockManager(8, PS, cache_pages=4, scope_pages=2)
    run(bm, "b", list(range(1, 10)), ATTACKER)
    run(bm, "a", list(range(50, 59)), VICTIM)
    b_pages, a_pages = bm.parked_pages()[ATTACKER], bm.parked_pages()[VICTIM]
    big = Sequence("a-big", list(range(60, 84)), VICTIM, SamplingParams(max_tokens=1))  # 6 pages
    assert bm.num_available_pages(VICTIM) == 6 and bm.can_allocate(big)
    bm.allocate(big)
    assert set(a_pages) <= set(big.block_table) and bm.parked_pages()[ATTACKER] == b_pages
    too_big = Sequence("b-big", list(range(1, 13)), ATTACKER, SamplingParams(max_tokens=1))  # 3 pages
    assert bm.num_available_pages(ATTACKER) == 2 and not bm.can_allocate(too_big)
    bm.check_invariants()


def test_per_request_scopes_park_nothing_and_take_no_room() -> None:
    bm = BlockManager(16, PS, cache_pages=8, scope_pages=4)
    run(bm, "b", list(range(1, 10)), ATTACKER)
    for i in range(20):
        run(bm, f"u{i}", list(range(1, 10)), compute_scope_key(TenantIdentity("u"), CacheScope.REQUEST, b"secret"))
    assert set(bm.parked_pages()) == {ATTACKER} and bm.num_parked_pages == 2


def test_a_zero_budget_keeps_no_page_but_same_scope_requests_still_share_while_mapped() -> None:
    bm = BlockManager(8, PS, cache_pages=0)
    leader = Sequence("l", list(range(1, 10)), ATTACKER, SamplingParams(max_tokens=1))
    bm.allocate(leader)
    leader.num_computed_tokens = leader.num_tokens
    bm.seal(leader)
    follower = Sequence("f", list(range(1, 10)), ATTACKER, SamplingParams(max_tokens=1))
    bm.allocate(follower)
    assert follower.num_cached_tokens == 2 * PS
    bm.deallocate(leader)
    bm.deallocate(follower)
    assert bm.num_parked_pages == 0 and bm.num_free_pages == 8
    bm.check_invariants()


@pytest.mark.parametrize(("cache_pages", "scope_pages"), [(4, 0), (4, 5), (-1, 1)])
def test_bad_budgets_are_refused(cache_pages: int, scope_pages: int) -> None:
    with pytest.raises(ConfigError):
        BlockManager(8, PS, cache_pages=cache_pages, scope_pages=scope_pages)
    with pytest.raises(ConfigError):
        ScopedPrefixCache(cache_pages, scope_pages)
