"""The audit log on SQLite and on a real PostgreSQL server, and `kvfence gateway log`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvfence.gateway.audit_log import AuditLog, Decision
from kvfence.gateway.cli import gateway


def _decision(i: int, **kw: object) -> Decision:
    base: dict[str, object] = dict(
        request_id=f"r{i}", tenant="alice" if i % 2 else "bob", organization="acme", workspace="eng",
        endpoint="chat", model="m", initial_class="public", data_class="internal", backend="a", status=200,
        outcome="ok", prompt_tokens=10 + i, annotations={"hook": "ran"})
    base.update(kw)
    return Decision(**base)  # type: ignore[arg-type]


def _exercise(log: AuditLog) -> None:
    for i in range(5):
        log.record_decision(_decision(i))
    log.record_decision(_decision(9, status=400, outcome="rejected", reason="context_length_exceeded: too long"))
    incident = log.record_incident(kind="cross_tenant_leak", request_id="r9", tenants=["alice", "bob"],
                                   details={"evidence": ["h1", "h2"]})
    log.flush()
    rows = log.query_decisions(limit=100)
    assert len(rows) == 6 and rows[0]["request_id"] == "r9"  # newest first
    assert rows[0]["annotations"] == {"hook": "ran"}
    assert [r["request_id"] for r in log.query_decisions(tenant="alice")] == ["r9", "r3", "r1"]
    assert log.query_decisions(outcome="rejected")[0]["reason"].startswith("context_length")
    got = log.get_incident(incident)
    assert got is not None and got["tenants"] == ["alice", "bob"] and got["details"]["evidence"] == ["h1", "h2"]
    assert [i["id"] for i in log.list_incidents()] == [incident]
    assert log.write_errors == 0


def test_sqlite_audit_log(tmp_path: Path) -> None:
    log = AuditLog(f"sqlite:///{tmp_path}/a.db")
    try:
        _exercise(log)
    finally:
        log.close()


@pytest.mark.postgres
def test_postgres_audit_log(postgres_url: str) -> None:
    log = AuditLog(postgres_url)
    try:
        with log._lock:
            log._store.conn.execute("DROP TABLE IF EXISTS gateway_decisions")
            log._store.conn.execute("DROP TABLE IF EXISTS gateway_incidents")
            log._store._create()
        _exercise(log)
    finally:
        log.close()
    # the CLI reads the same log by URL
    result = CliRunner().invoke(gateway, ["log", "--audit-log", postgres_url, "--outcome", "rejected", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[0])["request_id"] == "r9"


def test_log_cli_table_and_filters(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    log = AuditLog(url)
    _exercise(log)
    log.close()
    runner = CliRunner()
    result = runner.invoke(gateway, ["log", "--audit-log", url, "--tenant", "bob", "--since", "1h"])
    assert result.exit_code == 0, result.output
    assert "bob" in result.output and "alice" not in result.output and "r9" not in result.output
    bad = runner.invoke(gateway, ["log", "--audit-log", url, "--since", "yesterday"])
    assert bad.exit_code == 2 and "duration" in bad.output
    missing = runner.invoke(gateway, ["log", "--audit-log", f"sqlite:///{tmp_path}/none.db"])
    assert missing.exit_code != 0


def test_bad_audit_url_is_a_config_error() -> None:
    from kvfence.errors import ConfigError

    with pytest.raises(ConfigError, match="sqlite:///PATH"):
        AuditLog("mysql://x")
