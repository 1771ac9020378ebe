"""The audit log: every routing decision and incident, never prompt or answer text.

SQLite by default (``sqlite:///PATH``), PostgreSQL by URL (``postgresql://...``) for several gateway
replicas. Writes are queued to one background thread so the request path never waits on disk or
network; ``flush()`` waits for the queue to drain (tests, shutdown).
"""

from __future__ import annotations

import json
import logging
import operator
import queue
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvfence.errors import ConfigError
from kvfence.gateway.hooks import new_incident_id
from kvfence.http import timing_probe

__all__ = ["AuditLog", "Decision", "open_audit_log"]

log = logging.getLogger("kvfence.gateway.audit")


@dataclass(slots=True)
class Decision:
    """One request's outcome: who, which class, where it went, what was capped. No text."""

    request_id: str
    tenant: str
    organization: str
    workspace: str
    endpoint: str
    model: str
    initial_class: str
    data_class: str
    backend: str | None
    status: int
    outcome: str                      # ok | rejected | upstream_error | leak | error
    reason: str | None = None
    prompt_tokens: int | None = None
    prompt_limit: int | None = None
    context_limit: int | None = None
    tokens_cut: int = 0
    stream: bool = False
    salt_injected: bool = False
    client_salt_stripped: bool = False
    fallbacks: int = 0
    latency_ms: float | None = None
    overhead_ms: float | None = None
    annotations: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)


_DECISION_COLUMNS = [
    ("ts", "REAL", "DOUBLE PRECISION"), ("request_id", "TEXT", "TEXT"), ("tenant", "TEXT", "TEXT"),
    ("organization", "TEXT", "TEXT"), ("workspace", "TEXT", "TEXT"), ("endpoint", "TEXT", "TEXT"),
    ("model", "TEXT", "TEXT"), ("initial_class", "TEXT", "TEXT"), ("data_class", "TEXT", "TEXT"),
    ("backend", "TEXT", "TEXT"), ("status", "INTEGER", "INTEGER"), ("outcome", "TEXT", "TEXT"),
    ("reason", "TEXT", "TEXT"), ("prompt_tokens", "INTEGER", "INTEGER"),
    ("prompt_limit", "INTEGER", "INTEGER"), ("context_limit", "INTEGER", "INTEGER"),
    ("tokens_cut", "INTEGER", "INTEGER"), ("stream", "INTEGER", "INTEGER"),
    ("salt_injected", "INTEGER", "INTEGER"), ("client_salt_stripped", "INTEGER", "INTEGER"),
    ("fallbacks", "INTEGER", "INTEGER"), ("latency_ms", "REAL", "DOUBLE PRECISION"),
    ("overhead_ms", "REAL", "DOUBLE PRECISION"), ("annotations", "TEXT", "TEXT"),
]
_INCIDENT_COLUMNS = ["id", "ts", "request_id", "kind", "tenants", "details"]
# A row's values in column order, read in one call (this runs once per request, on the writer thread).
_DECISION_VALUES = operator.attrgetter(*(c[0] for c in _DECISION_COLUMNS if c[0] != "annotations"))
_FLAG_COLUMNS = frozenset({"stream", "salt_injected", "client_salt_stripped"})
_FLAG_POSITIONS = tuple(i for i, c in enumerate(_DECISION_COLUMNS) if c[0] in _FLAG_COLUMNS)
_ANNOTATIONS_POSITION = [c[0] for c in _DECISION_COLUMNS].index("annotations")


def _decision_values(row: Decision) -> tuple[Any, ...]:
    values = list(_DECISION_VALUES(row))
    values.insert(_ANNOTATIONS_POSITION, json.dumps(row.annotations, default=str, sort_keys=True)
                  if row.annotations else "{}")
    for i in _FLAG_POSITIONS:
        values[i] = int(values[i])
    return tuple(values)

# The writer gathers rows into one transaction: it writes once none has come for _QUIET_S (the burst
# of requests that brought them is over, so its CPU and GIL time fall in the event loop's quiet time,
# not in the middle of a burst), or _MAX_WAIT_S after the oldest, or at _MAX_BATCH rows; a flush or
# close writes at once. Each transaction also has a fixed cost (locks, the WAL frame header).
_QUIET_S = 0.01
_MAX_WAIT_S = 0.25
_MAX_BATCH = 5000
SQLITE_BUSY_TIMEOUT_S = 30.0
_PG_CREATE_LOCK = 0x6B766663  # 'kvfc': serialises the audit log's CREATE TABLEs across gateway workers
_FILTERS = ("tenant", "organization", "workspace", "data_class", "backend", "outcome", "request_id")


class _Store:
    """One database connection; all SQL of the log lives here."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_postgres = url.startswith(("postgresql://", "postgres://"))
        self.mark = "%s" if self.is_postgres else "?"
        if self.is_postgres:
            import psycopg

            try:
                self.conn: Any = psycopg.connect(url, autocommit=True)
            except psycopg.Error as exc:
                raise ConfigError(f"cannot open the audit log at {_redact(url)}: {exc}") from exc
        elif url.startswith("sqlite:///"):
            path = url.removeprefix("sqlite:///")
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            try:
                # Several gateway workers write the same file: WAL lets them read while one writes,
                # and the busy timeout makes a writer wait for the lock instead of failing at once.
                self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                                            timeout=SQLITE_BUSY_TIMEOUT_S)
                self.conn.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
                self.conn.execute("PRAGMA journal_mode=WAL")
                # WAL + NORMAL: never corrupt, at worst the last batch lost on power failure; no fsync
                # per commit on the request path's writer thread.
                self.conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise ConfigError(f"cannot open the audit log at {path}: {exc}") from exc
        else:
            raise ConfigError(f"audit log URL {url!r}: use sqlite:///PATH or postgresql://...")
        self._create()

    def _create(self) -> None:
        if self.is_postgres:
            # Workers starting together would race on CREATE TABLE IF NOT EXISTS (PostgreSQL can fail
            # one of two concurrent creations); one at a time under a transaction-free advisory lock.
            self.conn.execute("SELECT pg_advisory_lock(%s)", (_PG_CREATE_LOCK,))
            try:
                self._create_tables()
            finally:
                self.conn.execute("SELECT pg_advisory_unlock(%s)", (_PG_CREATE_LOCK,))
        else:
            self._create_tables()

    def _create_tables(self) -> None:
        key = "BIGSERIAL PRIMARY KEY" if self.is_postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
        kind = 2 if self.is_postgres else 1
        columns = ", ".join(f"{c[0]} {c[kind]}" for c in _DECISION_COLUMNS)
        real = "DOUBLE PRECISION" if self.is_postgres else "REAL"
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS gateway_decisions (id {key}, {columns})")
        self.conn.execute("CREATE INDEX IF NOT EXISTS gateway_decisions_ts ON gateway_decisions (ts)")
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS gateway_incidents (id TEXT PRIMARY KEY, ts {real}, "
                          "request_id TEXT, kind TEXT, tenants TEXT, details TEXT)")

    def insert_decisions(self, rows: Sequence[Decision]) -> None:
        names = [c[0] for c in _DECISION_COLUMNS]
        sql = (f"INSERT INTO gateway_decisions ({', '.join(names)}) "
               f"VALUES ({', '.join([self.mark] * len(names))})")
        self._executemany(sql, [_decision_values(row) for row in rows])

    def insert_incident(self, row: tuple[Any, ...]) -> None:
        sql = (f"INSERT INTO gateway_incidents ({', '.join(_INCIDENT_COLUMNS)}) "
               f"VALUES ({', '.join([self.mark] * len(_INCIDENT_COLUMNS))})")
        self._executemany(sql, [row])

    def _executemany(self, sql: str, values: list[tuple[Any, ...]]) -> None:
        if self.is_postgres:
            with self.conn.cursor() as cur:
                cur.executemany(sql, values)
        else:
            # IMMEDIATE: take the write lock (waiting up to the busy timeout) before anything is
            # read, so two workers' transactions never deadlock on a lock upgrade.
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.executemany(sql, values)
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def select(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, tuple(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def close(self) -> None:
        self.conn.close()


def _is_marker(entry: Decision | tuple[Any, ...] | None) -> bool:
    """A close (None) or a flush: the writer must not wait for more rows."""
    return entry is None or (isinstance(entry, tuple) and entry[0] == "__flush__")


def _redact(url: str) -> str:
    """A database URL without its password, for messages."""
    head, sep, tail = url.partition("@")
    if not sep or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, userinfo = head.partition("//")
    return f"{scheme}//{userinfo.split(':', 1)[0]}:***@{tail}"


class AuditLog:
    """Queued writer plus queries; implements :class:`~kvfence.gateway.hooks.IncidentRecorder`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._store = _Store(url)
        # SimpleQueue (C): a put is one call on the request path, not Queue's lock + condition dance.
        self._queue: queue.SimpleQueue[Decision | tuple[Any, ...] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # serialises the writer with direct queries on one connection
        self._thread = threading.Thread(target=self._run, name="kvfence-audit-writer", daemon=True)
        self._thread.start()
        self.write_errors = 0

    # -- writing ---------------------------------------------------------------------------------
    def record_decision(self, decision: Decision) -> None:
        self._queue.put(decision)

    def record_incident(
        self,
        *,
        kind: str,
        request_id: str,
        tenants: Sequence[str],
        details: Mapping[str, Any],
        incident_id: str | None = None,
    ) -> str:
        incident_id = incident_id or new_incident_id()
        self._queue.put((incident_id, time.time(), request_id, kind, json.dumps(list(tenants)),
                         json.dumps(dict(details), default=str, sort_keys=True)))
        return incident_id

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything queued so far is written."""
        done = threading.Event()
        self._queue.put(("__flush__", done))
        done.wait(timeout)

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(timeout=10)
        self._store.close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            pending = self._gather(item)
            started = time.perf_counter()
            batch: list[Decision] = []
            stop = False
            for entry in pending:
                if entry is None:
                    stop = True
                elif isinstance(entry, Decision):
                    batch.append(entry)
                elif entry[0] == "__flush__":
                    self._write(batch)
                    batch = []
                    entry[1].set()
                else:
                    self._write(batch)
                    batch = []
                    self._write_incident(entry)
            self._write(batch)
            timing_probe.writer_busy(started)
            if stop:
                return

    def _gather(self, first: Decision | tuple[Any, ...]) -> list[Decision | tuple[Any, ...] | None]:
        """``first`` and the rows that follow it, until they stop coming (see ``_QUIET_S``)."""
        pending: list[Decision | tuple[Any, ...] | None] = [first]
        urgent = _is_marker(first)
        deadline = time.monotonic() + _MAX_WAIT_S
        while not urgent and len(pending) < _MAX_BATCH:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(_QUIET_S, left))
            seen = len(pending)
            while True:  # what queued meanwhile
                try:
                    entry = self._queue.get_nowait()
                except queue.Empty:
                    break
                pending.append(entry)
                urgent = urgent or _is_marker(entry)
            if len(pending) == seen:
                break  # quiet
        return pending

    def _write(self, batch: list[Decision]) -> None:
        if not batch:
            return
        try:
            with self._lock:
                self._store.insert_decisions(batch)
        except Exception:
            self.write_errors += len(batch)
            log.exception("audit log: could not write %d decisions", len(batch))

    def _write_incident(self, row: tuple[Any, ...]) -> None:
        try:
            with self._lock:
                self._store.insert_incident(row)
        except Exception:
            self.write_errors += 1
            log.exception("audit log: could not write incident %s", row[0])

    # -- querying --------------------------------------------------------------------------------
    def query_decisions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
        **filters: str | None,
    ) -> list[dict[str, Any]]:
        """Newest first; ``filters`` are exact matches on tenant, data_class, backend, outcome ..."""
        where: list[str] = []
        params: list[Any] = []
        m = self._store.mark
        for name, value in filters.items():
            if name not in _FILTERS:
                raise ConfigError(f"cannot filter the audit log by {name!r}; use one of {', '.join(_FILTERS)}")
            if value is not None:
                where.append(f"{name} = {m}")
                params.append(value)
        if since is not None:
            where.append(f"ts >= {m}")
            params.append(since)
        if until is not None:
            where.append(f"ts < {m}")
            params.append(until)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        params.append(int(limit))
        with self._lock:
            rows = self._store.select(f"SELECT * FROM gateway_decisions{clause} ORDER BY ts DESC, id DESC "
                                      f"LIMIT {m}", params)
        for row in rows:
            row["annotations"] = json.loads(row["annotations"] or "{}")
        return rows

    def list_incidents(self, *, since: float | None = None, limit: int = 100) -> list[dict[str, Any]]:
        m = self._store.mark
        clause, params = (f" WHERE ts >= {m}", [since]) if since is not None else ("", [])
        with self._lock:
            rows = self._store.select(f"SELECT * FROM gateway_incidents{clause} ORDER BY ts DESC LIMIT {m}",
                                      [*params, int(limit)])
        return [_incident(r) for r in rows]

    def get_incident(self, incident_id: str) -> dict[str, Any] | None:
        with self._lock:
            rows = self._store.select(f"SELECT * FROM gateway_incidents WHERE id = {self._store.mark}",
                                      [incident_id])
        return _incident(rows[0]) if rows else None


def _incident(row: dict[str, Any]) -> dict[str, Any]:
    row["tenants"] = json.loads(row["tenants"] or "[]")
    row["details"] = json.loads(row["details"] or "{}")
    return row


def open_audit_log(url: str) -> AuditLog:
    """Open (and create the tables of) the audit log at ``url``."""
    return AuditLog(url)
