"""``kvfence audit`` against simulated OpenAI-compatible backends whose isolation behaviour is known."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kvfence.cli import cli
from tests.audit.conftest import AuditRun, check_result
from tests.audit.simbackend import SimConfig, run_backend
from tests.netutil import free_port

# The cache-sharing levels stop as soon as they are decided (sequential), well before --samples.
_FAST = ["--seed", "7", "--prompt-tokens", "600"]


def test_all_checks_pass_on_an_org_scoped_honest_backend(run_audit: AuditRun, tmp_path: Path) -> None:
    with run_backend(SimConfig(sharing="org", owned_by="kvfence", max_model_len=2048, kv_capacity=4096)) as url:
        result, data = run_audit("all", url, *_FAST)
    assert result.exit_code == 0, result.output
    assert [c["check"] for c in data["checks"]] == ["engine", "admission", "leak", "cache-sharing"]
    assert all(c["verdict"] == "pass" for c in data["checks"])
    levels = check_result(data, "cache-sharing")["measurements"]["levels"]
    assert levels["same-key"]["shares_cache"] and levels["same-org"]["shares_cache"]
    assert not levels["cross-org"]["shares_cache"]
    assert levels["cross-org"]["stats"]["p_value"] > 1e-4
    admission = check_result(data, "admission")
    assert admission["measurements"]["kv_capacity"] == 4096
    assert {a["outcome"] for a in admission["measurements"]["answers"]} <= {"ok", "rejected"}
    report = (tmp_path / "report" / "report.md").read_text()
    assert "cache-sharing-histograms.png" in report and "admission.png" in report

    questionnaire = CliRunner().invoke(cli, ["audit", "questionnaire", "--results", str(tmp_path / "report")])
    assert questionnaire.exit_code == 0, questionnaire.output
    text = (tmp_path / "report" / "questionnaire.md").read_text()
    assert "same-org: shares a cache" in text and "cross-org: no sharing detected" in text
    assert "engine kvfence" in text and "Disclosure policy" in text
    assert "declares cache scope 'org'" in text
    assert text.count("(to be filled in by the provider)") == 8


def test_cache_sharing_reports_global_sharing(run_audit: AuditRun) -> None:
    with run_backend(SimConfig(sharing="global")) as url:
        result, data = run_audit("cache-sharing", url, *_FAST)
    assert result.exit_code == 1, result.output
    sharing = check_result(data, "cache-sharing")
    assert sharing["measurements"]["levels"]["cross-org"]["shares_cache"]
    assert "cross-org" in sharing["summary"]


def test_cache_sharing_without_a_detectable_cache_is_inconclusive(run_audit: AuditRun) -> None:
    with run_backend(SimConfig(sharing="none")) as url:
        result, data = run_audit("cache-sharing", url, *_FAST, "--samples", "40")
    assert result.exit_code == 2, result.output
    sharing = check_result(data, "cache-sharing")
    assert sharing["verdict"] == "inconclusive" and "power check" in sharing["summary"]
    assert not sharing["measurements"]["levels"]["cross-org"]["measured"]


def test_admission_fails_against_a_truncating_backend(run_audit: AuditRun) -> None:
    with run_backend(SimConfig(over_length="truncate", max_model_len=2048)) as url:
        result, data = run_audit("admission", url, "--seed", "3")
    assert result.exit_code == 1, result.output
    admission = check_result(data, "admission")
    titles = " ".join(e["title"] for e in admission["evidence"])
    # "just above context" (the prompt fits, max_tokens does not) may be clamped: never a finding.
    assert "prompt alone over context" in titles and "far above context" in titles
    assert "just above context" not in titles
    assert any("silently truncated" in e["detail"] for e in admission["evidence"])


def test_leak_fails_against_a_backend_that_returns_another_tenants_prompt(run_audit: AuditRun) -> None:
    with run_backend(SimConfig(over_length="leak", max_model_len=2048)) as url:
        result, data = run_audit("leak", url, "--seed", "5", "--victim-requests", "4", "--concurrency", "4")
    assert result.exit_code == 1, result.output
    leak = check_result(data, "leak")
    assert leak["verdict"] == "finding"
    assert any("from A's request" in e["detail"] for e in leak["evidence"])
    assert any(e["title"].startswith("tenant B's over-length request") for e in leak["evidence"])


def test_engine_flags_an_old_vllm(run_audit: AuditRun) -> None:
    with run_backend(SimConfig(owned_by="vllm", version="0.8.5", metrics=("vllm:num_requests_running",))) as url:
        result, data = run_audit("engine", url)
    assert result.exit_code == 1, result.output
    engine = check_result(data, "engine")
    assert engine["measurements"]["engine"] == "vllm" and engine["measurements"]["version"] == "0.8.5"
    assert any("CVE-2025-46570" in e["title"] for e in engine["evidence"])
    with run_backend(SimConfig(owned_by="acme")) as url:
        result, data = run_audit("engine", url)
    assert result.exit_code == 2 and check_result(data, "engine")["verdict"] == "inconclusive"


def test_could_not_run_is_exit_2_with_a_clear_message(run_audit: AuditRun) -> None:
    result, _ = run_audit("admission", f"http://127.0.0.1:{free_port()}")
    assert result.exit_code == 2 and "cannot reach" in result.output
    with run_backend(SimConfig()) as url:
        result, _ = run_audit("engine", url, keys=["--key", "wrong"])
        assert result.exit_code == 2 and "rejected --key (401)" in result.output
        result, _ = run_audit("leak", url, keys=["--key", "key-a"])
        assert result.exit_code == 2 and "--key-b" in result.output
        result, _ = run_audit("cache-sharing", url, "--samples", "2")
        assert result.exit_code == 2 and "--samples" in result.output
    result, _ = run_audit("engine", "not-a-url")
    assert result.exit_code == 2 and "--endpoint" in result.output
    assert "Traceback" not in result.output
