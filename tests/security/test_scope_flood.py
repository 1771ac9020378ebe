"""A tenant that mints scopes (a fresh ``cache_salt`` per pair of requests) cannot grow the engine's
per-scope counters, its stats copies or /metrics without bound."""

from __future__ import annotations

import pytest

from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv import block_manager
from kvfence.engine.kv.block_manager import OTHER_SCOPES, BlockManager
from kvfence.engine.sampling.sampling_params import SamplingParams

PS = 4


def _hit(bm: BlockManager, scope: bytes, rid: str) -> int:
    """Compute a 9-token prompt under ``scope``, then map it again: the second maps two pages."""
    prompt = list(range(9))
    for i in range(2):
        seq = Sequence(f"{rid}-{i}", prompt, scope, SamplingParams(max_tokens=1))
        bm.allocate(seq)
        seq.num_computed_tokens = seq.num_tokens
        bm.seal(seq)
        cached = seq.num_cached_tokens
        bm.deallocate(seq)
    return cached


def test_minted_scopes_are_counted_under_one_bucket_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_manager, "MAX_SCOPES_COUNTED", 8)
    bm = BlockManager(64, PS)
    total = sum(_hit(bm, f"salt-{i}".encode().ljust(32, b"."), f"r{i}") for i in range(40))
    assert total == 40 * 2 * PS
    counts = bm.prefix_hit_tokens_by_scope
    assert len(counts) == 9 and counts[OTHER_SCOPES] == 32 * 2 * PS
    assert sum(counts.values()) == total
    bm.check_invariants()
