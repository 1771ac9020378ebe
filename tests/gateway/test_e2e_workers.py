"""End to end: ``kvfence gateway --workers 2``, real processes on loopback, the official ``openai`` client.

Which worker serves a connection is the kernel's choice; the tests open connections until they hold
one on each worker (``/health`` names the worker) and keep them alive, so a request goes through the
worker the test means.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from kvfence.gateway.answer.relay import OVERHEAD_HEADER
from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import CHILD_PYTHONPATH, KVFENCE, REPO, FakeBackend, Gateway

KEYS = {name: f"kvf-gw-workers-{name}-key" for name in ("acme", "globex", "limited")}


def _tenant(name: str, **limits: int) -> dict[str, Any]:
    return {"name": name, "key_sha256": hash_api_key(KEYS[name]), "organization": name,
            "default_class": "public", "limits": limits}


def _policy(backend_url: str, audit_url: str, *, limited: bool = False, **gateway: Any) -> dict[str, Any]:
    return {
        "gateway": {"audit_log": audit_url, "capacity_refresh_s": 0, "load_protection": False, **gateway},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "fake", "url": backend_url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [_tenant("acme"), _tenant("globex"),
                    *([_tenant("limited", requests_per_minute=4)] if limited else [])],
    }


def _health(client: httpx.Client) -> dict[str, Any]:
    worker = client.get("/health").json()["worker"]
    assert isinstance(worker, dict)
    return worker


def _wait_for_workers(gw: Gateway, count: int, timeout: float = 60) -> dict[int, int]:
    """Worker index -> pid, once every worker answers."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        try:
            with httpx.Client(base_url=gw.root, timeout=5) as c:
                worker = _health(c)
                seen[worker["index"]] = worker["pid"]
        except httpx.HTTPError:
            time.sleep(0.05)
    assert len(seen) == count, f"only workers {sorted(seen)} answered"
    return seen


@contextlib.contextmanager
def connection_on(gw: Gateway, index: int, tries: int = 200) -> Iterator[httpx.Client]:
    """A client whose one kept-alive connection the kernel handed to worker ``index``."""
    for _ in range(tries):
        client = httpx.Client(base_url=gw.root, timeout=30,
                              limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
        if _health(client)["index"] == index:
            try:
                yield client
            finally:
                client.close()
            return
        client.close()
    raise AssertionError(f"no connection reached worker {index} in {tries} tries")


def openai_on(gw: Gateway, client: httpx.Client, tenant: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=KEYS[tenant], max_retries=0, http_client=client)


@pytest.fixture(scope="module")
def backend() -> Iterator[FakeBackend]:
    b = FakeBackend("workers-backend")
    yield b
    b.stop()


def _start(policy: dict[str, Any], tmp: Path, workers: int = 2, env: dict[str, str] | None = None) -> Gateway:
    gw = Gateway(policy, tmp, env=env, extra=["--workers", str(workers)])
    try:
        _wait_for_workers(gw, workers)
    except BaseException:
        gw.stop()  # else the gateway and its workers outlive the failed test (seen on a busy machine)
        raise
    return gw


def _stop(gw: Gateway) -> int:
    gw.proc.send_signal(signal.SIGTERM)
    return gw.proc.wait(timeout=60)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_workers_share_the_port_sum_their_metrics_and_log_every_request(
        backend: FakeBackend, tmp_path: Path) -> None:
    audit = tmp_path / "audit.db"
    gw = _start(_policy(backend.url, f"sqlite:///{audit}"), tmp_path)
    try:
        pids = _wait_for_workers(gw, 2)
        sent = {0: 3, 1: 5}
        for index, count in sent.items():
            with connection_on(gw, index) as client:
                caller = openai_on(gw, client, "acme")
                for i in range(count):
                    raw = caller.chat.completions.with_raw_response.create(
                        model="m", messages=[{"role": "user", "content": f"hello {i}"}], stream=i % 2 == 1)
                    assert float(raw.headers[OVERHEAD_HEADER]) >= 0  # still this request's own figure
                    answer = raw.parse()
                    if i % 2 == 1:
                        assert "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
                    else:
                        assert answer.choices[0].message.content
        for index in (0, 1):  # whichever worker answers the scrape, it reports both
            with connection_on(gw, index) as client:
                text = client.get("/metrics").text
            assert 'kvfence_gateway_requests_total{backend="fake",data_class="public",endpoint="chat",' \
                   'status="200"} 8.0' in text, text
            assert "kvfence_gateway_workers_reporting 2.0" in text
    finally:
        assert _stop(gw) == 0
    assert not any(_alive(pid) for pid in pids.values())
    rows = sqlite3.connect(audit).execute(
        "SELECT count(*) FROM gateway_decisions WHERE tenant = 'acme' AND status = 200").fetchone()[0]
    assert rows == 8


def test_a_killed_worker_is_replaced_and_the_port_keeps_answering(backend: FakeBackend, tmp_path: Path) -> None:
    gw = _start(_policy(backend.url, f"sqlite:///{tmp_path / 'audit.db'}"), tmp_path)
    try:
        pids = _wait_for_workers(gw, 2)
        os.kill(pids[0], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = _wait_for_workers(gw, 2)
            if now[0] != pids[0]:
                break
            time.sleep(0.1)
        assert now[0] != pids[0] and now[1] == pids[1]
        with connection_on(gw, 0) as client:
            assert openai_on(gw, client, "acme").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "still there?"}]).choices[0].message.content
    finally:
        assert _stop(gw) == 0
    assert "worker 0" in (tmp_path / "gateway.log").read_text() and "restarting it" in (tmp_path / "gateway.log").read_text()


def test_split_limits_give_each_worker_its_share(backend: FakeBackend, tmp_path: Path) -> None:
    gw = _start(_policy(backend.url, f"sqlite:///{tmp_path / 'audit.db'}", limited=True,
                         worker_limits="split"), tmp_path)
    try:
        for index in (0, 1):  # requests_per_minute 4 over 2 workers: 2 each
            with connection_on(gw, index) as client:
                caller = openai_on(gw, client, "limited")
                for _ in range(2):
                    caller.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
                with pytest.raises(openai.RateLimitError):
                    caller.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        _stop(gw)


def _refused(policy: dict[str, Any], tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    config = tmp / "gateway.yaml"
    config.write_text(yaml.safe_dump(policy, sort_keys=False))
    return subprocess.run([KVFENCE, "gateway", "--config", str(config), "--port", "0", *extra], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH}, capture_output=True, text=True,
                          timeout=120)


def test_workers_refuse_to_start_when_limits_would_multiply(backend: FakeBackend, tmp_path: Path) -> None:
    done = _refused(_policy(backend.url, f"sqlite:///{tmp_path / 'a.db'}", limited=True), tmp_path,
                    "--workers", "2")
    assert done.returncode == 2, done.stderr
    assert "limited (requests_per_minute)" in done.stderr and "gateway.redis_url" in done.stderr
    # the config key says the same as the option
    done = _refused(_policy(backend.url, f"sqlite:///{tmp_path / 'a.db'}", limited=True, workers=3), tmp_path)
    assert done.returncode == 2 and "gateway.workers is 3" in done.stderr


def test_workers_refuse_an_in_process_leak_index(backend: FakeBackend, tmp_path: Path) -> None:
    policy = _policy(backend.url, f"sqlite:///{tmp_path / 'a.db'}", load_protection=True, worker_limits="split")
    done = _refused(policy, tmp_path, "--workers", "2")
    assert done.returncode == 2 and "leak.index: redis" in done.stderr, done.stderr


def test_a_worker_that_cannot_start_stops_the_gateway_non_zero(backend: FakeBackend, tmp_path: Path) -> None:
    policy = _policy(backend.url, f"sqlite:///{tmp_path / 'a.db'}", worker_limits="split",
                     hooks=["no_such_module_anywhere:factory"])
    done = _refused(policy, tmp_path, "--workers", "2")
    assert done.returncode != 0
    assert "no_such_module_anywhere" in done.stderr and "did not start" in done.stderr, done.stderr


@pytest.mark.redis
def test_limits_are_one_count_across_workers_with_redis(backend: FakeBackend, redis_url: str, tmp_path: Path) -> None:
    gw = _start(_policy(backend.url, f"sqlite:///{tmp_path / 'audit.db'}", limited=True,
                         redis_url=redis_url), tmp_path)
    try:
        with connection_on(gw, 0) as first, connection_on(gw, 1) as second:
            for client in (first, second, first, second):  # 4 allowed in all, over both workers
                openai_on(gw, client, "limited").chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
            for client in (first, second):
                with pytest.raises(openai.RateLimitError):
                    openai_on(gw, client, "limited").chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        _stop(gw)


@pytest.mark.postgres
def test_postgres_audit_log_keeps_every_workers_rows(backend: FakeBackend, postgres_url: str, tmp_path: Path) -> None:
    import psycopg

    gw = _start(_policy(backend.url, postgres_url), tmp_path)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            before = conn.execute("SELECT count(*) FROM gateway_decisions WHERE tenant = 'globex'").fetchone()
        for index in (0, 1):
            with connection_on(gw, index) as client:
                caller = openai_on(gw, client, "globex")
                for i in range(6):
                    if i % 2:
                        caller.chat.completions.create(model="m", messages=[{"role": "user", "content": f"hi {i}"}])
                        continue
                    with caller.chat.completions.create(model="m", stream=True,
                                                        messages=[{"role": "user", "content": f"hi {i}"}]) as chunks:
                        assert list(chunks)
    finally:
        assert _stop(gw) == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        after = conn.execute("SELECT count(*) FROM gateway_decisions WHERE tenant = 'globex'").fetchone()
    assert before is not None and after is not None and after[0] - before[0] == 12


def test_sigterm_lets_every_workers_answers_in_progress_finish(tmp_path: Path) -> None:
    slow = FakeBackend("workers-slow")
    try:
        slow.control(delay_s=2.0)
        gw = _start(_policy(slow.url, f"sqlite:///{tmp_path / 'audit.db'}"), tmp_path)
        answers: dict[int, str] = {}

        def ask(index: int, client: httpx.Client) -> None:
            answers[index] = openai_on(gw, client, "acme").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "take your time"}]).choices[0].message.content or ""

        with contextlib.ExitStack() as clients:
            threads = [threading.Thread(target=ask, args=(index, clients.enter_context(connection_on(gw, index))))
                       for index in (0, 1)]
            for thread in threads:
                thread.start()
            time.sleep(0.8)  # both requests are waiting on the backend
            code = _stop(gw)
            for thread in threads:
                thread.join(timeout=30)
        assert code == 0
        assert set(answers) == {0, 1} and all(answers.values())
    finally:
        slow.stop()
