"""``kvfence gateway incidents list / show ID --notice`` against a real SQLite audit log."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kvfence.gateway.cli import gateway
from kvfence.gateway.records.audit_log import open_audit_log


def test_list_and_notice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    log = open_audit_log(url)
    incident_id = log.record_incident(
        kind="cross_tenant_leak", request_id="req-42", tenants=["globex", "acme"],
        details={"detector": "ngram", "victim_tenants": ["acme"], "receiving_tenant": "globex",
                 "evidence_fingerprints": ["00ff00ff00ff00ff"] * 4, "run_words": 8, "window_s": 900,
                 "emitted_chars_before_stop": 31, "withheld": "the rest of the answer", "backend": "shared-a",
                 "model": "llama", "stream": True, "request_started_at": "2026-11-29T22:00:00+00:00"})
    log.close()
    runner = CliRunner()
    listed = runner.invoke(gateway, ["incidents", "list", "--audit-log", url])
    assert listed.exit_code == 0, listed.output
    assert incident_id in listed.output and "globex, acme" in listed.output
    shown = runner.invoke(gateway, ["incidents", "show", incident_id, "--audit-log", url])
    assert shown.exit_code == 0 and "00ff00ff00ff00ff" in shown.output
    notice = runner.invoke(gateway, ["incidents", "show", incident_id, "--audit-log", url, "--notice"])
    assert notice.exit_code == 0, notice.output
    for part in ("What happened", "may have been exposed: acme", "received the answer: globex",
                 "Time window", "What was withheld", "31 characters", "What we changed", "Next update"):
        assert part in notice.output
    missing = runner.invoke(gateway, ["incidents", "show", "inc_nope", "--audit-log", url])
    assert missing.exit_code == 1 and "no incident" in missing.output
    empty_url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert "no incidents" in runner.invoke(gateway, ["incidents", "list", "--audit-log", empty_url]).output
