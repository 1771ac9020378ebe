"""The sequential cache-sharing audit against the simulated provider: it finishes, and never passes falsely."""

from __future__ import annotations

import time

import pytest

from kvfence.audit.sequential import LevelDecision, SequentialPlan, look_sizes
from kvfence.audit.stats import compare_timings
from tests.audit.conftest import AuditRun, check_result
from tests.audit.simprovider import ProviderConfig, run_provider

_ARGS = ["--prompt-tokens", "600", "--seed", "5"]


@pytest.mark.parametrize(("scope", "code"), [("org", 0), ("global", 1), ("key", 0)])
def test_each_level_stops_once_decided(scope: str, code: int, run_audit: AuditRun) -> None:
    with run_provider(ProviderConfig(cache_scope=scope)) as url:
        result, data = run_audit("cache-sharing", url, *_ARGS)
    assert result.exit_code == code, result.output
    levels = check_result(data, "cache-sharing")["measurements"]["levels"]
    decided = [lv for lv in levels.values() if lv.get("measured")]
    assert decided and all(lv["stopped"] == "decided" and lv["samples_per_procedure"] < 250 for lv in decided)
    if scope != "global":
        assert levels["cross-org"]["decision"] == "not shared"
        assert levels["same-org"]["decision"] == ("shares" if scope == "org" else "not shared")
    assert "at most ~" in result.stderr  # the progress bar's estimate


# Seeds 4 and 8 gave the old audit a PASS (exit 0) on this globally sharing target.
@pytest.mark.parametrize("seed", [4, 8])
def test_a_sharing_target_never_passes_at_ten_samples(seed: int, run_audit: AuditRun) -> None:
    """At 10 samples an old version passed a globally sharing target: now a finding or inconclusive."""
    with run_provider(ProviderConfig(cache_scope="global", jitter_s=0.004)) as url:
        result, data = run_audit("cache-sharing", url, "--prompt-tokens", "200", "--seed", str(seed),
                                 "--samples", "10")
    assert result.exit_code in (1, 2), result.output
    assert check_result(data, "cache-sharing")["verdict"] != "pass"


def test_the_time_budget_stops_the_audit_inconclusive(run_audit: AuditRun) -> None:
    with run_provider(ProviderConfig(cache_scope="org", base_s=0.02)) as url:
        started = time.monotonic()
        result, data = run_audit("cache-sharing", url, *_ARGS, "--time-budget", "4")
        took = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert took < 30
    sharing = check_result(data, "cache-sharing")
    assert "time budget" in sharing["summary"]


def test_the_plan_looks_and_decisions() -> None:
    assert look_sizes(250) == (10, 15, 22, 34, 51, 76, 114, 171, 250)
    assert look_sizes(10) == (10,)
    plan = SequentialPlan.build(250, 1e-4, 0.01)
    hits = [0.010 + 0.0001 * (i % 7) for i in range(40)]
    misses = [0.030 + 0.0001 * (i % 7) for i in range(40)]
    same_key = compare_timings(hits, misses)
    assert plan.decide(same_key) is LevelDecision.SHARES and plan.reference_settled(same_key)
    assert not plan.reference_settled(compare_timings(hits[:15], misses[:15]))
    other = [0.030 + 0.0001 * ((i * 3) % 7) for i in range(40)]
    level = compare_timings(other, misses)
    unlike = compare_timings(hits, other)
    assert plan.decide(level, unlike, same_key.ks_statistic) is LevelDecision.NOT_SHARED
    # Hits as fast as the same key's: sharing, never "not shared".
    shared = compare_timings(hits[::-1], misses)
    assert plan.decide(shared, compare_timings(hits, hits[::-1]), same_key.ks_statistic) is LevelDecision.SHARES
    # Drift: this level's hits slower than the same-key ones, but as far below its own misses: undecided.
    slow_hits, slow_misses = [t + 0.05 for t in hits], [t + 0.05 for t in misses]
    drifted = compare_timings(slow_hits[:12], slow_misses[:12])
    strict = SequentialPlan.build(250, 1e-12, 0.01)
    assert strict.decide(drifted, compare_timings(hits, slow_hits[:12]), same_key.ks_statistic) \
        is LevelDecision.UNDECIDED
