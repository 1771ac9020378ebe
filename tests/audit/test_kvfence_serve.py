"""``kvfence audit`` against a real ``kvfence serve``: the verdicts the issue asks for.

Small samples keep these in the CI budget; ``bench/audit_power.py`` measures how many samples a
correct verdict needs (docs/benchmarks.md, "Auditor samples").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.audit.conftest import AuditRun, check_result
from tests.audit.kvfence_server import KvfenceServer, kvfence_serve

# A short context keeps the admission probes cheap on a 2-core machine; ~190 letters are 400 tokens
# of the built-in byte-level tokenizer, long enough for a prefix hit to show in TTFT.
_SERVE_ARGS = ("--max-model-len", "512", "--kv-cache-tokens", "16384", "--device", "cpu", "--num-threads", "1")
# The levels stop as soon as they are decided (sequential looks); a pass needs enough samples to
# show that cross-org sharing would have been seen (the cross-org hits measurably slower than the
# same-key ones), a finding usually fewer; --samples only caps a level. alpha 1e-3 instead of the default 1e-4 (a false "shares" verdict across orgs has odds 1e-3).
_SHARING = ["--samples", "200", "--prompt-tokens", "400", "--alpha", "1e-3", "--seed", "11"]


@pytest.fixture(scope="module")
def org_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvfenceServer]:
    with kvfence_serve(tmp_path_factory.mktemp("serve-org"), *_SERVE_ARGS, cache_scope="org") as server:
        yield server


@pytest.mark.slow
def test_org_scope_shares_within_the_org_and_not_across(run_audit: AuditRun, org_server: KvfenceServer) -> None:
    result, data = run_audit("cache-sharing", org_server.url, *_SHARING, keys=org_server.key_args)
    assert result.exit_code == 0, result.output
    levels = check_result(data, "cache-sharing")["measurements"]["levels"]
    assert levels["same-key"]["shares_cache"]
    assert levels["same-org"]["shares_cache"]
    assert not levels["cross-org"]["shares_cache"]


def test_admission_passes_against_kvfence_serve(run_audit: AuditRun, org_server: KvfenceServer) -> None:
    result, data = run_audit("admission", org_server.url, "--seed", "2", keys=org_server.key_args)
    assert result.exit_code == 0, result.output
    admission = check_result(data, "admission")
    m = admission["measurements"]
    assert m["max_context"] == 512 and m["kv_capacity"] == 16384
    assert m["exact_sizes"]  # the built-in byte-level tokenizer: every size is hit exactly
    outcomes = {(a["probe"], a["stream"]): a["outcome"] for a in m["answers"]}
    assert outcomes[("at context", False)] == "ok"
    # The prompt fits, max_tokens reaches past the context: refusing and clamping are both honest.
    assert outcomes[("just above context", True)] in {"rejected", "clamped (answered, generation stopped at the context)"}
    assert all(a["status"] == 400 for a in m["answers"] if a["expect"] == "reject")


def test_leak_and_engine_pass_against_kvfence_serve(run_audit: AuditRun, org_server: KvfenceServer,
                                                    tmp_path: Path) -> None:
    result, data = run_audit("leak", org_server.url, "--seed", "3", "--victim-requests", "4", "--concurrency", "4",
                             "--max-tokens", "8", "--prompt-tokens", "200", keys=org_server.key_args)
    assert result.exit_code == 0, result.output
    assert check_result(data, "leak")["measurements"]["attacker_requests"]["over-length"]["rejected_4xx"] == 2
    result, data = run_audit("engine", org_server.url, keys=org_server.key_args)
    assert result.exit_code == 0, result.output
    engine = check_result(data, "engine")["measurements"]
    assert engine["engine"] == "kvfence" and engine["version"]  # from the server's /version


def test_global_scope_shares_across_orgs(run_audit: AuditRun, tmp_path: Path) -> None:
    with kvfence_serve(tmp_path / "serve", *_SERVE_ARGS, cache_scope="global") as server:
        # The same-org level adds nothing here; leaving it out keeps the test short.
        result, data = run_audit("cache-sharing", server.url, *_SHARING,
                                 keys=["--key", server.key_a, "--key-b", server.key_b])
    assert result.exit_code == 1, result.output
    sharing = check_result(data, "cache-sharing")
    levels = sharing["measurements"]["levels"]
    assert levels["same-key"]["shares_cache"] and levels["cross-org"]["shares_cache"]
    assert not levels["same-org"]["measured"]
    assert "cross-org" in sharing["summary"]


def test_all_exits_0_against_kvfence_serve(run_audit: AuditRun, org_server: KvfenceServer) -> None:
    """Every check, one command: the honest default configuration passes (the boundary is no finding)."""
    result, data = run_audit("all", org_server.url, "--prompt-tokens", "400", "--seed", "1", "--no-progress",
                             keys=org_server.key_args)
    assert result.exit_code == 0, result.output
    assert {c["check"]: c["verdict"] for c in data["checks"]} == {
        "engine": "pass", "admission": "pass", "leak": "pass", "cache-sharing": "pass"}


@pytest.mark.slow
def test_all_exits_1_against_kvfence_serve_without_scrubbing(run_audit: AuditRun, tmp_path: Path) -> None:
    with kvfence_serve(tmp_path / "serve", *_SERVE_ARGS, "--unsafe-no-scrub", cache_scope="org") as server:
        result, data = run_audit("all", server.url, "--prompt-tokens", "400", "--seed", "1", "--no-progress",
                                 "--skip", "cache-sharing", keys=server.key_args)
    assert result.exit_code == 1, result.output
    assert check_result(data, "engine")["verdict"] == "finding"
