"""Policy reload without a restart: SIGHUP and ``kvfence gateway reload``, real gateway processes on
loopback (one process, and ``--workers 2``), a real backend, traffic while the file changes.

- a valid new policy is in force for the next request (a new tenant's key works, a removed one gets 401);
- a request in flight finishes under the policy it started with (its tenant removed meanwhile: its
  stream still ends whole, from the backend it was routed to);
- a bad policy during traffic: every request still answered under the old policy, one log line with the
  file:line error (no traceback), ``/health`` (without the text) and ``/metrics`` say so, ``kvfence gateway reload`` refuses
  the file itself (exit 2) without signalling;
- with ``--workers 2`` every worker reloads (the generation gauge sums over the workers).
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import KVFENCE, REPO, FakeBackend, Gateway
from tests.gateway.test_e2e_workers import _wait_for_workers

KEYS = {name: f"kvf-gw-reload-{name}-key" for name in ("acme", "globex", "initech")}


def _tenant(name: str) -> dict[str, Any]:
    return {"name": name, "key_sha256": hash_api_key(KEYS[name]), "organization": name, "default_class": "public"}


def _policy(backends: list[FakeBackend], audit_url: str, tenants: tuple[str, ...], **gateway: Any) -> dict[str, Any]:
    return {
        "gateway": {"audit_log": audit_url, "capacity_refresh_s": 0, "load_protection": False, **gateway},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": b.name, "url": b.url, "tier": "shared", "capacity": "policy",
                      "priority": 100 + i, "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}
                     for i, b in enumerate(backends)],
        "tenants": [_tenant(t) for t in tenants],
    }


@pytest.fixture
def backend() -> Any:
    backend = FakeBackend("reload-a")
    yield backend
    backend.stop()


@pytest.fixture
def backend_other() -> Any:
    backend = FakeBackend("reload-b")
    yield backend
    backend.stop()


def _ask(gw: Gateway, tenant: str, *, stream: bool = False, timeout: float = 30) -> httpx.Response:
    return httpx.post(gw.url + "/chat/completions", timeout=timeout, headers={"Authorization": f"Bearer {KEYS[tenant]}"},
                      json={"model": "m", "stream": stream, "max_tokens": 8,
                            "messages": [{"role": "user", "content": "hello"}]})


def _health(gw: Gateway) -> dict[str, Any]:
    policy = httpx.get(gw.root + "/health", timeout=10).json()["policy"]
    assert isinstance(policy, dict)
    return policy


def _wait_generation(gw: Gateway, generation: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _health(gw)["generation"] != generation:
        assert time.monotonic() < deadline, f"generation still {_health(gw)}"
        time.sleep(0.05)


def _write(path: Path, policy: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(policy, sort_keys=False))


def _reload(gw: Gateway, pid_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KVFENCE, "gateway", "reload", "--config", str(gw.config), "--pid-file", str(pid_file)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def _metric(gw: Gateway, name: str, labels: str = "") -> float:
    text = httpx.get(gw.root + "/metrics", timeout=10).text
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_reload_adds_and_removes_tenants_without_a_restart(tmp_path: Path, backend: FakeBackend) -> None:
    audit = f"sqlite:///{tmp_path}/audit.db"
    pid_file = tmp_path / "gateway.pid"
    gw = Gateway(_policy([backend], audit, ("acme",)), tmp_path, extra=["--pid-file", str(pid_file)])
    try:
        assert _ask(gw, "acme").status_code == 200
        assert _ask(gw, "globex").status_code == 401
        _write(gw.config, _policy([backend], audit, ("globex",)))
        proc = _reload(gw, pid_file)
        assert proc.returncode == 0, proc.stderr
        assert f"asked the gateway (pid {gw.proc.pid}) to reload" in proc.stdout
        _wait_generation(gw, 2)
        assert _ask(gw, "globex").status_code == 200
        revoked = _ask(gw, "acme")
        assert revoked.status_code == 401 and revoked.json()["error"]["code"] == "invalid_api_key"
        assert _health(gw)["last_reload_failed"] is False
        assert _metric(gw, "kvfence_gateway_policy_reloads_total", '{outcome="ok"}') == 1
        models = httpx.get(gw.url + "/models", headers={"Authorization": f"Bearer {KEYS['acme']}"}, timeout=10)
        assert models.status_code == 401  # every route, not only completions, runs the new tenants
    finally:
        gw.stop()
    # a pid file left behind (uvicorn ends its process by re-raising SIGTERM) is not taken for a gateway
    if pid_file.exists():
        stale = _reload(gw, pid_file)
        assert stale.returncode == 2 and "is the gateway running?" in stale.stderr


def test_a_request_in_flight_finishes_under_the_policy_it_started_with(
        tmp_path: Path, backend: FakeBackend, backend_other: FakeBackend) -> None:
    audit = f"sqlite:///{tmp_path}/audit.db"
    gw = Gateway(_policy([backend], audit, ("acme",)), tmp_path)
    try:
        backend.control(delay_s=3.0, chunk_chars=2)
        result: dict[str, Any] = {}

        def slow() -> None:
            result["reply"] = _ask(gw, "acme", stream=True, timeout=60)

        thread = threading.Thread(target=slow)
        thread.start()
        deadline = time.monotonic() + 20
        while not backend.received():  # the request has reached the backend: it is in flight
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # acme removed and the only backend replaced: a request under the new policy could do neither
        _write(gw.config, _policy([backend_other], audit, ("globex",)))
        gw.proc.send_signal(signal.SIGHUP)
        _wait_generation(gw, 2)
        thread.join(timeout=60)
        reply = result["reply"]
        assert reply.status_code == 200
        assert "data: [DONE]" in reply.text
        content = "".join(re.findall(r'"content": ?"([^"]*)"', reply.text))
        assert content == "hello from reload-a"
        assert _ask(gw, "acme").status_code == 401
        backend.control(delay_s=0.0)
        assert _ask(gw, "globex").json()["choices"][0]["message"]["content"] == "hello from reload-b"
    finally:
        gw.stop()


def test_a_bad_policy_during_traffic_keeps_the_old_one(tmp_path: Path, backend: FakeBackend) -> None:
    audit = f"sqlite:///{tmp_path}/audit.db"
    pid_file = tmp_path / "gateway.pid"
    gw = Gateway(_policy([backend], audit, ("acme",)), tmp_path, extra=["--pid-file", str(pid_file)])
    good = gw.config.read_text()
    statuses: list[int] = []
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            statuses.append(_ask(gw, "acme", stream=len(statuses) % 2 == 0).status_code)

    try:
        thread = threading.Thread(target=traffic)
        thread.start()
        deadline = time.monotonic() + 30
        while not statuses:  # the app is up (SIGHUP before that is ignored: the policy is being read)
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # a typo'd key on line 3, then a tenant naming a data class that does not exist
        broken = good.replace("capacity_refresh_s:", "capacity_refresh_secs:", 1)
        gw.config.write_text(broken)
        line = next(i for i, text in enumerate(broken.splitlines(), 1) if "capacity_refresh_secs" in text)
        refused = _reload(gw, pid_file)
        assert refused.returncode == 2
        assert f"{gw.config}:{line}: gateway.capacity_refresh_secs" in refused.stderr
        assert "Traceback" not in refused.stderr
        for n in range(1, 3):  # the gateway is told anyway (an operator's own kill -HUP)
            gw.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 20
            while _metric(gw, "kvfence_gateway_policy_reloads_total", '{outcome="failed"}') < n:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        unknown_class = yaml.safe_load(good)
        unknown_class["tenants"][0]["default_class"] = "secret"
        _write(gw.config, unknown_class)
        gw.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while _metric(gw, "kvfence_gateway_policy_reloads_total", '{outcome="failed"}') < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        stop.set()
        thread.join(timeout=60)
        health = _health(gw)
        assert health["generation"] == 1
        assert health["last_reload_failed"] is True
        assert str(gw.config) not in httpx.get(gw.root + "/health", timeout=10).text  # the details are in the log
        assert len(statuses) >= 3 and set(statuses) == {200}, statuses
        assert _ask(gw, "acme").status_code == 200
    finally:
        stop.set()
        gw.stop()
    log = (tmp_path / "gateway.log").read_text()
    failures = [text for text in log.splitlines() if "policy reload failed" in text]
    assert len(failures) == 3, log
    assert f"{gw.config}:{line}: gateway.capacity_refresh_secs" in failures[0]
    assert "'secret'" in failures[2] or "secret" in failures[2]
    assert "Traceback" not in log


def test_every_worker_reloads(tmp_path: Path, backend: FakeBackend) -> None:
    audit = f"sqlite:///{tmp_path}/audit.db"
    pid_file = tmp_path / "gateway.pid"
    gw = Gateway(_policy([backend], audit, ("acme",)), tmp_path,
                 extra=["--workers", "2", "--pid-file", str(pid_file)])
    try:
        _wait_for_workers(gw, 2)
        _write(gw.config, _policy([backend], audit, ("globex",)))
        proc = _reload(gw, pid_file)
        assert proc.returncode == 0, proc.stderr
        assert int(pid_file.read_text()) == gw.proc.pid  # the supervisor, which tells each worker
        deadline = time.monotonic() + 30
        # the counter sums over the workers: 2 means each of them reloaded
        while _metric(gw, "kvfence_gateway_policy_reloads_total", '{outcome="ok"}') != 2:
            assert time.monotonic() < deadline, httpx.get(gw.root + "/metrics", timeout=10).text
            time.sleep(0.1)
        assert _metric(gw, "kvfence_gateway_policy_generation") == 2
        for _ in range(8):  # new connections, spread over the workers by the kernel
            assert _ask(gw, "globex").status_code == 200
            assert _ask(gw, "acme").status_code == 401
    finally:
        gw.stop()


def test_data_protection_reloads_and_keeps_its_leak_index(tmp_path: Path, backend: FakeBackend) -> None:
    audit = f"sqlite:///{tmp_path}/audit.db"
    secret = {"KVFENCE_GATEWAY_SECRET": "r" * 40}

    def policy(pii: str, tenants: tuple[str, ...]) -> dict[str, Any]:
        data = _policy([backend], audit, tenants, load_protection=True)
        data["data_classes"][0]["protection"] = {"pii": pii}
        return data

    gw = Gateway(policy("pseudonymise", ("acme", "globex")), tmp_path, env=secret)
    try:
        def ask(tenant: str, text: str) -> httpx.Response:
            return httpx.post(gw.url + "/chat/completions", timeout=30, headers={"Authorization": f"Bearer {KEYS[tenant]}"},
                              json={"model": "m", "messages": [{"role": "user", "content": text}]})

        acme_secret = "the quarterly merger with zebra holdings closes on friday at noon sharp"
        assert ask("acme", acme_secret).status_code == 200  # its fingerprints are in the leak index now
        assert ask("globex", "mail jane.doe@example.com the notes").status_code == 200  # pseudonymised
        _write(gw.config, policy("block", ("acme", "globex", "initech")))
        gw.proc.send_signal(signal.SIGHUP)
        _wait_generation(gw, 2)
        blocked = ask("globex", "mail jane.doe@example.com the notes")
        assert blocked.status_code == 400 and blocked.json()["error"]["code"] == "request_blocked"
        assert ask("initech", "hello").status_code == 200
        # the backend now answers globex with acme's text from before the reload: still a leak, withheld
        backend.control(reply=acme_secret)
        leaked = ask("globex", "what is new?")
        assert leaked.status_code == 502, leaked.text
        assert "incident inc_" in leaked.text
    finally:
        gw.stop()


def test_settings_that_need_a_restart_are_named_and_refused() -> None:
    from kvfence.gateway.policy.schema import Policy
    from kvfence.gateway.reload import RESTART_ONLY, restart_only_changes

    base = Policy.model_validate({"data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
                                  "backends": [{"name": "b", "url": "http://127.0.0.1:9/v1", "tier": "shared"}]})
    changed = base.model_copy(update={"gateway": base.gateway.model_copy(
        update={"workers": 4, "audit_log": "sqlite:///other.db", "backend_retry_after_s": 9.0})})
    assert restart_only_changes(base, changed) == ["gateway.audit_log", "gateway.workers"]  # the retry pause reloads
    assert set(RESTART_ONLY) <= set(type(base.gateway).model_fields)


def test_a_reload_that_needs_a_missing_extra_says_which(tmp_path: Path) -> None:
    """In-process: the reloader of a runtime whose new policy names a NER model while Presidio cannot be
    imported fails in one line naming the ner extra, and keeps the old policy."""
    import asyncio
    import builtins

    from kvfence.gateway.policy.loader import load_policy
    from kvfence.gateway.reload import PolicyReloader
    from kvfence.gateway.runtime import GatewayRuntime

    audit = f"sqlite:///{tmp_path}/audit.db"
    backend = {"name": "b", "url": "http://127.0.0.1:9/v1", "tier": "shared", "capacity": "policy",
               "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}
    data = {"gateway": {"audit_log": audit, "capacity_refresh_s": 0},
            "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}], "backends": [backend],
            "tenants": [_tenant("acme")]}
    path = tmp_path / "gateway.yaml"
    _write(path, data)
    (tmp_path / "ner").mkdir()
    runtime = GatewayRuntime.create(load_policy(path), base_dir=tmp_path, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    runtime.policy_loader = lambda: load_policy(path)
    real_import = builtins.__import__

    def no_presidio(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("presidio_analyzer"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    async def scenario() -> tuple[bool, str | None]:
        await runtime.start()
        try:
            reloader = PolicyReloader(runtime)
            data["gateway"]["protection"] = {"ner_model": str(tmp_path / "ner")}
            _write(path, data)
            builtins.__import__ = no_presidio
            try:
                return await reloader.reload(), runtime.last_reload_error
            finally:
                builtins.__import__ = real_import
        finally:
            await runtime.close()

    ok, error = asyncio.run(scenario())
    assert ok is False
    assert error == ("the new policy needs the ner extra: pip install 'kvfence[ner]' "
                     "(missing module: presidio_analyzer)")
    assert runtime.generation == 1


def test_protection_turned_off_and_on_again_by_reloads() -> None:
    from prometheus_client import CollectorRegistry

    from kvfence.gateway.policy.schema import Policy
    from kvfence.gateway.protection import build_protection_hook, reload_protection_hooks

    def policy(enabled: bool) -> Policy:
        return Policy.model_validate({
            "gateway": {"protection": {"enabled": enabled, "leak": {"enabled": False}}},
            "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
            "backends": [{"name": "b", "url": "http://127.0.0.1:9/v1", "tier": "shared"}]})

    registry = CollectorRegistry()
    hook = build_protection_hook(policy(True), incidents=None, registry=registry)
    assert hook is not None
    off = reload_protection_hooks(policy(False), [hook], incidents=None, registry=registry)
    assert off == []
    (on,) = reload_protection_hooks(policy(True), off, incidents=None, registry=registry)
    assert on.metrics is hook.metrics  # the same series, not a second registration


def test_a_retired_backends_pool_is_closed_after_its_read_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import kvfence.gateway.reload as reload_module
    from kvfence.gateway.policy.loader import load_policy
    from kvfence.gateway.reload import PolicyReloader
    from kvfence.gateway.runtime import GatewayRuntime

    monkeypatch.setattr(reload_module, "RETIRE_GRACE_S", 0.0)

    def policy(name: str) -> dict[str, Any]:
        return {"gateway": {"audit_log": f"sqlite:///{tmp_path}/audit.db", "capacity_refresh_s": 0,
                            "load_protection": False},
                "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
                "backends": [{"name": name, "url": "http://127.0.0.1:9/v1", "tier": "shared", "capacity": "policy",
                              "read_timeout_s": 0.2, "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
                "tenants": [_tenant("acme")]}

    path = tmp_path / "gateway.yaml"
    _write(path, policy("old"))
    runtime = GatewayRuntime.create(load_policy(path), base_dir=tmp_path, env={})
    runtime.policy_loader = lambda: load_policy(path)

    async def scenario() -> tuple[int, int]:
        await runtime.start()
        try:
            reloader = PolicyReloader(runtime)
            _write(path, policy("new"))
            assert await reloader.reload()
            just_after = len(runtime._retired)
            await asyncio.sleep(0.6)
            return just_after, len(runtime._retired)
        finally:
            await runtime.close()

    just_after, later = asyncio.run(scenario())
    assert (just_after, later) == (1, 0)
