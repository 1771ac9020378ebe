"""Pure logic of the auditor: token fitting, KS statistics, verdicts, leak scanning, advisories."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvfence.audit.admission import plan_probes
from kvfence.audit.advisories import Fingerprint, MatchState, match_advisories, parse_version
from kvfence.audit.fingerprint import GATEWAYS, identify
from kvfence.audit.prompts import TokenModel, make_canary, random_units, spaced
from kvfence.audit.scan import SecretIndex
from kvfence.audit.sharing_policy import AllowedSharing, Level, LevelOutcome, decide
from kvfence.audit.stats import compare_timings
from kvfence.audit.target import AuditTarget, normalise_endpoint
from kvfence.audit.verdict import Verdict, combined_exit_code
from kvfence.errors import ConfigError


# The fit is microseconds; on a machine loaded by other suites input generation was "too slow" (2
# inputs in 1.2 s), a health check about the machine, not this code.
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(overhead=st.integers(0, 50), per_unit=st.integers(1, 4), target=st.integers(60, 100_000))
def test_token_model_exact_fit_hits_any_target(overhead: int, per_unit: int, target: int) -> None:
    samples = [(u, overhead + per_unit * u) for u in (8, 32, 96)]
    model = TokenModel.fit(samples)
    assert model.exact
    units = model.units_for(target)
    assert model.tokens(units) <= target
    assert model.tokens(units + 1) > target
    over = model.units_over(target)
    assert model.tokens(over) > target and (over == 1 or model.tokens(over - 1) <= target)


def test_token_model_inexact_and_degenerate() -> None:
    model = TokenModel.fit([(8, 13), (32, 40), (96, 101)])
    assert not model.exact
    with pytest.raises(ValueError):
        TokenModel.fit([(8, 10), (8, 10)])
    with pytest.raises(ValueError):
        TokenModel.fit([(8, 10), (16, 10)])


def test_ks_detects_faster_hits_and_not_noise() -> None:
    rng = random.Random(0)
    miss = [0.050 + rng.gauss(0, 0.003) for _ in range(250)]
    hit = [0.020 + rng.gauss(0, 0.003) for _ in range(250)]
    same = [0.050 + rng.gauss(0, 0.003) for _ in range(250)]
    faster = compare_timings(hit, miss)
    assert faster.detects_cache(1e-4)
    assert faster.ks_statistic > 0.95 and faster.median_diff_ms == pytest.approx(30, abs=2)
    assert faster.prob_hit_faster > 0.99
    assert not compare_timings(same, miss).detects_cache(1e-4)
    # A slower "hit" is never read as a cache, whatever the two-sided distance.
    assert not compare_timings(miss, hit).detects_cache(1e-4)


def test_decide_levels() -> None:
    yes = lambda lvl: LevelOutcome(lvl, True, 1e-20)  # noqa: E731
    no = lambda lvl: LevelOutcome(lvl, False, 0.5)  # noqa: E731
    org_scoped = [yes(Level.SAME_KEY), yes(Level.SAME_ORG), no(Level.CROSS_ORG)]
    assert decide(org_scoped, AllowedSharing.ORG)[0] is Verdict.PASS
    assert decide(org_scoped, AllowedSharing.KEY)[0] is Verdict.FINDING
    global_ = [yes(Level.SAME_KEY), yes(Level.SAME_ORG), yes(Level.CROSS_ORG)]
    verdict, summary = decide(global_, AllowedSharing.ORG)
    assert verdict is Verdict.FINDING and "cross-org" in summary
    assert decide(global_, AllowedSharing.GLOBAL)[0] is Verdict.PASS
    # No power: never "safe".
    assert decide([no(Level.SAME_KEY), no(Level.CROSS_ORG)], AllowedSharing.ORG)[0] is Verdict.INCONCLUSIVE
    # The forbidden level was not measured: no pass.
    assert decide([yes(Level.SAME_KEY), LevelOutcome(Level.CROSS_ORG, None)], AllowedSharing.ORG)[0] \
        is Verdict.INCONCLUSIVE


def test_secret_index_finds_canaries_and_ngrams_but_not_own_text() -> None:
    rng = random.Random(1)
    index = SecretIndex()
    canary = make_canary(rng)
    prompt = " ".join([*spaced(canary), *random_units(rng, 200)])
    index.add("A-1", prompt, [canary])
    assert index.scan("nothing to see here " * 10) == []
    spaced_echo = f"sure: {' '.join(spaced(canary))} ok"
    hits = index.scan(spaced_echo)
    assert "canary" in {h.kind for h in hits} and {h.source_request for h in hits} == {"A-1"}
    assert index.scan(f"x{canary.lower()}y")[0].source_request == "A-1"
    tail = " ".join(prompt.split()[-40:])  # the prompt's end, without its canary
    hits = index.scan(f"leaked: {tail}")
    assert [h.kind for h in hits] == ["ngram"] and hits[0].source_request == "A-1"
    assert index.scan(spaced_echo, exclude=["A-1"]) == []


def test_plan_probes_brackets_the_limits() -> None:
    probes = plan_probes(4096, 3000, 16, exact=True)
    by_name = {p.name: p for p in probes}
    assert by_name["at context"].prompt_tokens + 16 == 4096 and by_name["at context"].expect_admit
    assert by_name["just above context"].prompt_tokens + 16 == 4097
    assert not by_name["above KV capacity"].expect_admit and by_name["above KV capacity"].prompt_tokens > 3000
    assert plan_probes(4096, None, 16, exact=False)[1].expect_admit is None
    with pytest.raises(ConfigError):
        plan_probes(16, None, 16, exact=True)


def test_versions_and_advisories() -> None:
    assert parse_version("0.8.5.post1") == (0, 8, 5, 1)
    assert parse_version("v0.9.0rc1") < parse_version("0.9.0")  # type: ignore[operator]
    assert parse_version("garbage") is None
    old = match_advisories(Fingerprint(engine="vllm", version="0.8.5"))
    assert {m.advisory.id: m.state for m in old}["CVE-2025-46570"] is MatchState.AFFECTED
    new = {m.advisory.id for m in match_advisories(Fingerprint(engine="vllm", version="0.10.1"))}
    assert "CVE-2025-46570" not in new and "KVF-SALT-CONVENTION" in new
    unknown = {m.advisory.id: m.state for m in match_advisories(Fingerprint(engine="vllm"))}
    assert unknown["CVE-2025-46570"] is MatchState.POSSIBLY_AFFECTED
    pd = {m.advisory.id: m.state for m in match_advisories(Fingerprint(engine="sglang", features={"disaggregation"}))}
    assert pd["SGLANG-PD-ABORT"] is MatchState.AFFECTED
    assert match_advisories(Fingerprint(engine="kvfence", version="0.1.0")) == []
    for advisory_match in old:
        assert all(src.startswith("https://") for src in advisory_match.advisory.sources)


def test_identify_votes_from_clues() -> None:
    fp = identify({"models.owned_by": ["vllm"], "metrics.names": ["vllm:num_requests_running"],
                   "/version": {"version": "0.8.4"}, "headers": {"server": "uvicorn"}})
    assert (fp.engine, fp.version) == ("vllm", "0.8.4")
    fp = identify({"/get_server_info": {"version": "0.4.6", "disaggregation_mode": "prefill", "tp_size": 1},
                   "metrics.names": ["sglang:num_running_reqs"]})
    assert fp.engine == "sglang" and "disaggregation" in fp.features
    assert identify({"headers": {"server": "uvicorn"}}).engine is None


def test_target_validation() -> None:
    assert normalise_endpoint("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    for bad in ("127.0.0.1:8000", "ftp://x", "http://"):
        with pytest.raises(ConfigError, match="--endpoint"):
            normalise_endpoint(bad)
    with pytest.raises(ConfigError, match="different keys"):
        AuditTarget.build(endpoint="http://x", key="k", key_b="k")
    with pytest.raises(ConfigError, match="--header"):
        AuditTarget.build(endpoint="http://x", key="k", headers=("Authorization: Bearer z",))
    target = AuditTarget.build(endpoint="http://x", key="secret-a", key_b="secret-b")
    assert "secret" not in repr(target.tenant_a)


def test_combined_exit_code() -> None:
    assert combined_exit_code([Verdict.PASS, Verdict.PASS]) == 0
    assert combined_exit_code([Verdict.PASS, Verdict.INCONCLUSIVE]) == 2
    assert combined_exit_code([Verdict.ERROR, Verdict.FINDING]) == 1


def test_a_gateway_is_not_taken_for_the_engine_behind_it() -> None:
    # kvfence's own gateway: its /v1/models owner and its metrics, not kvfence serve's
    fp = identify({"models.owned_by": ["kvfence-gateway"],
                   "metrics.names": ["kvfence_gateway_backend_up", "kvfence_gateway_in_flight"], "headers": {}})
    assert fp.engine == "kvfence-gateway" and fp.engine in GATEWAYS
    assert identify({"headers": {"x-litellm-version": "1.52.0"}}).engine == "litellm"
    # kvfence serve itself is still an engine
    assert identify({"models.owned_by": ["kvfence"], "metrics.names": ["kvfence_kv_pages_free"]}).engine == "kvfence"


def test_a_version_in_a_server_header_decides_when_nothing_better_says() -> None:
    fp = identify({"headers": {"server": "vllm/0.8.4"}})
    assert (fp.engine, fp.version) == ("vllm", "0.8.4")
    fp = identify({"headers": {"x-engine": "SGLang 0.4.6.post1"}, "models.owned_by": ["sglang"]})
    assert (fp.engine, fp.version) == ("sglang", "0.4.6.post1")
    # /version is more specific than a header and wins
    fp = identify({"headers": {"server": "vllm/0.8.4"}, "/version": {"version": "0.10.1"}})
    assert fp.version == "0.10.1"
    assert identify({"headers": {"server": "uvicorn"}, "models.owned_by": ["vllm"]}).version is None
