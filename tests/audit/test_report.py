"""Reports and the questionnaire from saved results, without an endpoint."""

from __future__ import annotations

import json
import random
from pathlib import Path

from click.testing import CliRunner

from kvfence.audit.questionnaire import QUESTIONS, render_questionnaire
from kvfence.audit.report import write_report
from kvfence.audit.verdict import CheckResult, Evidence, Verdict, load_results
from kvfence.cli import cli


def _sharing_result() -> CheckResult:
    rng = random.Random(0)
    levels = {}
    for name, shares in (("same-key", True), ("same-org", True), ("cross-org", False)):
        hit = [rng.gauss(20 if shares else 50, 3) for _ in range(30)]
        miss = [rng.gauss(50, 3) for _ in range(30)]
        levels[name] = {"measured": True, "shares_cache": shares, "hit_ttft_ms": hit, "miss_ttft_ms": miss,
                        "stats": {"p_value": 1e-12 if shares else 0.4, "ks_statistic": 0.9 if shares else 0.1,
                                  "median_hit_ms": 20.0, "median_miss_ms": 50.0, "median_diff_ms": 30.0,
                                  "prob_hit_faster": 0.99}}
    return CheckResult(check="cache-sharing", verdict=Verdict.PASS, summary="org-scoped <as expected>",
                       endpoint="http://127.0.0.1:1", measurements={"levels": levels})


def test_report_round_trip_escapes_html_and_embeds_plots(tmp_path: Path) -> None:
    leak = CheckResult(check="leak", verdict=Verdict.FINDING, summary="1 answer carried A's text",
                       endpoint="http://127.0.0.1:1",
                       evidence=[Evidence("B got <script>alert(1)</script>", "canary KVFCANARYX")],
                       measurements={"attacker_requests": {"over-length": {"sent": 2, "answered_200": 2,
                                                                           "rejected_4xx": 0, "other": 0}}})
    for result in (_sharing_result(), leak):
        result.save(tmp_path)
    results = load_results(tmp_path)
    assert [r.check for r in results] == ["leak", "cache-sharing"]
    paths = write_report(results, tmp_path)
    html = paths["html"].read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert html.count("data:image/png;base64,") == 3
    summary = json.loads(paths["json"].read_text())
    assert summary["exit_code"] == 1 and len(summary["checks"]) == 2
    md = paths["markdown"].read_text()
    assert "| cross-org | no |" in md and "![TTFT histograms" in md

    rerender = CliRunner().invoke(cli, ["audit", "report", "--results", str(tmp_path)])
    assert rerender.exit_code == 0, rerender.output
    empty = CliRunner().invoke(cli, ["audit", "report", "--results", str(tmp_path / "nothing")])
    assert empty.exit_code == 2


def test_questionnaire_without_results_leaves_every_answer_open() -> None:
    text = render_questionnaire([])
    assert text.count("not measurable from outside / not run") == len(QUESTIONS)
    measured = render_questionnaire([_sharing_result()])
    assert "cross-org: no sharing detected" in measured
    assert "no cache sharing between the two organisations" in measured


def test_report_labels_severity_explains_statistics_and_never_paints_a_clamp_red(tmp_path: Path) -> None:
    from kvfence.audit.verdict import Severity

    admission = CheckResult(
        check="admission", verdict=Verdict.FINDING, summary="1 finding", endpoint="http://127.0.0.1:1",
        evidence=[Evidence("answer to 'follow-up' carries text of an earlier request", "canary KVFCANARYX",
                           severity=Severity.CRITICAL, impact="one customer can receive another's data")],
        notes=["just above context (plain): the endpoint answered 200, i.e. it clamps generation at the context"])
    admission.save(tmp_path)
    paths = write_report(load_results(tmp_path), tmp_path)
    html = paths["html"].read_text()
    assert '<span class="sev sev-critical"' in html and "one customer can receive another" in html
    assert '<span class="sev note">note</span> just above context' in html
    for term in ("KS D", "ECDF", "p-value", "beta"):
        assert f"<dt><b>{term}</b></dt>" in html
    md = paths["markdown"].read_text()
    assert "**[CRITICAL] answer to 'follow-up'" in md and "*Impact:*" in md
    assert "## How to read this report" in md and "Notes (observations, not defects)" in md
    reloaded = load_results(tmp_path)[0]
    assert reloaded.evidence[0].severity is Severity.CRITICAL
