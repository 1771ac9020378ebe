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


def test_too_few_samples_are_inconclusive_never_a_pass(run_audit: AuditRun) -> None:
    """At 10 samples the test cannot show it would see sharing: inconclusive, whatever it measured."""
    with run_provider(ProviderConfig(cache_scope="org")) as url:
        result, data = run_audit("cache-sharing", url, *_ARGS, "--samples", "10")
    assert result.exit_code == 2, result.output
    sharing = check_result(data, "cache-sharing")
    assert sharing["verdict"] == "inconclusive" and "cannot show that sharing would have been detected" \
        in sharing["summary"]


def test_the_time_budget_stops_the_audit_inconclusive(run_audit: AuditRun) -> None:
    with run_provider(ProviderConfig(cache_scope="org", base_s=0.02)) as url:
        started = time.monotonic()
        result, data = run_audit("cache-sharing", url, *_ARGS, "--time-budget", "4")
        took = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert took < 30
    sharing = check_result(data, "cache-sharing")
    assert "time budget" in sharing["summary"]


def test_the_plan_looks_and_bounds() -> None:
    assert look_sizes(250) == (10, 15, 22, 34, 51, 76, 114, 171, 250)
    assert look_sizes(10) == (10,)
    plan = SequentialPlan.build(250, 1e-4, 0.01)
    hits = [0.010 + 0.0001 * (i % 7) for i in range(80)]
    misses = [0.030 + 0.0001 * (i % 7) for i in range(80)]
    same_key = compare_timings(hits, misses)
    assert plan.decide(same_key, None) is LevelDecision.SHARES and plan.reference_settled(same_key)
    reference = plan.reference_effect(same_key)
    assert 0.4 < reference < 1.0
    other = [0.030 + 0.0001 * ((i * 3) % 7) for i in range(80)]
    assert plan.decide(compare_timings(other, misses), reference) is LevelDecision.NOT_SHARED
    few = compare_timings(other[:10], misses[:10])
    assert plan.decide(few, reference) is LevelDecision.UNDECIDED  # 10 samples can never rule sharing out
