"""The audit log on SQLite and on a real PostgreSQL server, and `kvfence gateway log`."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kvfence.gateway.cli import gateway
from kvfence.gateway.records import audit_log
from kvfence.gateway.records.audit_log import AuditLog, Decision


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


def test_rows_that_keep_coming_are_written_together_once_they_stop(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A burst of requests ends in a burst of rows: the writer waits until they stop coming and writes
    # them in one transaction, after the burst, not a transaction every few ms in the middle of it.
    # It does not wait without end, though: rows that never stop are written every _MAX_WAIT_S.
    log = AuditLog(f"sqlite:///{tmp_path}/a.db")
    batches: list[tuple[float, int]] = []
    insert = log._store.insert_decisions

    def counted(rows: Any) -> None:
        batches.append((time.monotonic(), len(rows)))
        insert(rows)

    monkeypatch.setattr(log._store, "insert_decisions", counted)
    # wider than the gaps below (the defaults are 10 and 250 ms)
    monkeypatch.setattr(audit_log, "_QUIET_S", 0.1)
    monkeypatch.setattr(audit_log, "_MAX_WAIT_S", 5.0)
    try:
        sent: list[float] = []
        for i in range(40):  # 40 rows over ~120 ms, closer together than the writer's quiet time
            log.record_decision(_decision(i))
            sent.append(time.monotonic())
            time.sleep(0.003)
        burst_end = time.monotonic()
        deadline = time.monotonic() + 5
        while sum(n for _, n in batches) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sum(n for _, n in batches) == 40 and len(log.query_decisions(limit=100)) == 40
        # A loaded machine may stall this loop past the quiet time: each such gap may end a batch. With
        # none, the 40 rows went in one transaction, after the burst, not one every 10 ms within it.
        pauses = sum(1 for a, b in itertools.pairwise(sent) if b - a > 0.05)
        assert len(batches) <= 1 + pauses
        if pauses == 0:
            assert batches[0][0] >= burst_end

        batches.clear()
        monkeypatch.setattr(audit_log, "_MAX_WAIT_S", 0.2)
        started = time.monotonic()
        while time.monotonic() - started < 0.9:  # rows that never stop for long
            log.record_decision(_decision(99))
            time.sleep(0.003)
        assert len(batches) >= 2  # the oldest row waited at most _MAX_WAIT_S
        log.flush()
        assert sum(n for _, n in batches) == len(log.query_decisions(limit=1000)) - 40
    finally:
        log.close()


def test_a_flush_does_not_wait_for_the_writer_to_gather(tmp_path: Path) -> None:
    log = AuditLog(f"sqlite:///{tmp_path}/a.db")
    try:
        log.record_decision(_decision(1))
        started = time.monotonic()
        log.flush()
        assert time.monotonic() - started < 0.2  # under _MAX_WAIT_S: the flush cut the gathering short
        assert len(log.query_decisions()) == 1
    finally:
        log.close()


def _fresh_database(postgres_url: str) -> str:
    """A new, empty database on the test server, so other suites' rows never mix with ours."""
    import uuid

    import psycopg

    name = "kvf_gw_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_url.rsplit("/", 1)[0] + "/" + name


@pytest.mark.postgres
def test_postgres_audit_log(postgres_url: str) -> None:
    url = _fresh_database(postgres_url)
    log = AuditLog(url)
    try:
        _exercise(log)
    finally:
        log.close()
    # the CLI reads the same log by URL
    result = CliRunner().invoke(gateway, ["log", "--audit-log", url, "--outcome", "rejected", "--json"])
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


@pytest.mark.postgres
def test_gateway_process_writes_its_audit_log_to_postgres(postgres_url: str, backend_a: Any,
                                                           tmp_path: Path) -> None:
    import openai

    from kvfence.gateway.policy.tenants import hash_api_key
    from tests.gateway.conftest import Gateway

    policy = {
        "gateway": {"audit_log": postgres_url, "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "a", "url": backend_a.url, "tier": "shared"}],
        "tenants": [{"name": "pg-tenant", "key_sha256": hash_api_key("kvf-gw-pg"), "organization": "pgorg",
                     "default_class": "public"}],
    }
    gw = Gateway(policy, tmp_path)
    try:
        with openai.OpenAI(base_url=gw.url, api_key="kvf-gw-pg", max_retries=0) as c:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "platypus secrets"}])
    finally:
        gw.stop()  # a clean stop flushes the queued rows
    rows = AuditLog(postgres_url)
    try:
        found = rows.query_decisions(tenant="pg-tenant")
    finally:
        rows.close()
    assert found and found[0]["backend"] == "a" and found[0]["status"] == 200
    assert "platypus" not in json.dumps(found, default=str)
