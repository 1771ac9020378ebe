"""``kvfence gateway keys add|revoke|list``: through the real command, on copies of the example policies.

Only the hash is written; the rest of the file (comments, layout) is left as it was; a tenants file gets
the new tenants; an edit that would make the policy invalid writes nothing; concurrent edits under the
lock lose nothing; the file's mode is kept; and a gateway takes the change on reload.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from kvfence.gateway.policy.loader import load_policy
from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import KVFENCE, REPO, FakeBackend, Gateway

DEMO = REPO / "examples/gateway-demo.yaml"


def _keys(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KVFENCE, "gateway", "keys", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(DEMO.read_text())
    return path


def test_add_writes_only_the_hash_and_keeps_the_rest_of_the_file(policy: Path) -> None:
    before = policy.read_text()
    added = _keys("add", "--config", str(policy), "--name", "carol", "--org", "initech", "--class", "public",
                  "--requests-per-minute", "30")
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()
    assert key.startswith("kvf-gw-") and len(key) > 30
    after = policy.read_text()
    assert key not in after
    assert hash_api_key(key) in after
    assert after.startswith(before.rstrip("\n"))  # comments and every other line as they were
    tenant = next(t for t in load_policy(policy).tenants if t.name == "carol")
    assert (tenant.organization, tenant.default_class, tenant.limits.requests_per_minute) == ("initech", "public", 30)
    listed = _keys("list", "--config", str(policy))
    assert listed.returncode == 0
    assert f"carol  initech/default  class:public  sha256:{hash_api_key(key)[:12]}" in listed.stdout
    assert key not in listed.stdout


def test_revoke_removes_exactly_that_tenant(policy: Path) -> None:
    before = policy.read_text()
    assert _keys("add", "--config", str(policy), "--name", "carol", "--org", "initech").returncode == 0
    revoked = _keys("revoke", "--config", str(policy), "--name", "carol")
    assert revoked.returncode == 0, revoked.stderr
    assert policy.read_text() == before
    gone = _keys("revoke", "--config", str(policy), "--name", "acme-alice")
    assert gone.returncode == 0
    assert [t.name for t in load_policy(policy).tenants] == ["globex-bob"]
    assert "# DEMO ONLY" in policy.read_text()
    missing = _keys("revoke", "--config", str(policy), "--name", "nobody")
    assert missing.returncode == 2 and missing.stderr.strip() == f"error: no tenant 'nobody' in {policy}"


def test_an_edit_that_would_break_the_policy_writes_nothing(policy: Path) -> None:
    before = policy.read_text()
    for args, said in ((["--name", "x", "--org", "o", "--class", "no-such-class"], "no-such-class"),
                       (["--name", "globex-bob", "--org", "o"], "already exists"),
                       (["--name", "bad name!", "--org", "o"], "name")):
        proc = _keys("add", "--config", str(policy), *args)
        assert proc.returncode == 2, proc
        assert said in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stdout == ""  # no key handed out for a tenant that was not written
    assert policy.read_text() == before


def test_a_tenants_file_gets_the_new_tenants(tmp_path: Path) -> None:
    data = yaml.safe_load(DEMO.read_text())
    inline = data.pop("tenants")
    data["tenants_file"] = "tenants.yaml"
    policy = tmp_path / "gateway.yaml"
    policy.write_text(yaml.safe_dump(data, sort_keys=False))
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text("# the tenants\ntenants:\n" + "".join(
        "  " + line for line in yaml.safe_dump(inline, sort_keys=False).splitlines(keepends=True)))
    policy_before = policy.read_text()
    assert _keys("add", "--config", str(policy), "--name", "carol", "--org", "initech").returncode == 0
    assert policy.read_text() == policy_before
    assert tenants.read_text().startswith("# the tenants\n")
    assert [t.name for t in load_policy(policy).tenants] == ["acme-alice", "globex-bob", "carol"]
    assert _keys("revoke", "--config", str(policy), "--name", "acme-alice").returncode == 0
    assert [t.name for t in load_policy(policy).tenants] == ["globex-bob", "carol"]


def test_comments_around_an_indentless_list_stay_where_they_are(tmp_path: Path) -> None:
    data = yaml.safe_load(DEMO.read_text())
    policy = tmp_path / "gateway.yaml"
    # PyYAML writes `tenants:` as an indentless list (`- name:` at the key's column)
    policy.write_text("# head\n" + yaml.safe_dump(data, sort_keys=False) + "# the end\n")
    before = policy.read_text()
    assert _keys("add", "--config", str(policy), "--name", "carol", "--org", "initech").returncode == 0
    lines = policy.read_text().splitlines()
    assert lines[-1] == "# the end" and any(line == "- name: carol" for line in lines)
    assert _keys("revoke", "--config", str(policy), "--name", "carol").returncode == 0
    assert policy.read_text() == before
    assert _keys("revoke", "--config", str(policy), "--name", "globex-bob").returncode == 0
    assert policy.read_text().endswith("    max_concurrent: 8\n# the end\n")
    assert [t.name for t in load_policy(policy).tenants] == ["acme-alice"]


def test_an_empty_tenant_list_and_the_file_mode(tmp_path: Path) -> None:
    data = yaml.safe_load(DEMO.read_text())
    data["tenants"] = []
    policy = tmp_path / "gateway.yaml"
    policy.write_text(yaml.safe_dump(data, sort_keys=False))
    os.chmod(policy, 0o640)
    assert _keys("add", "--config", str(policy), "--name", "carol", "--org", "initech").returncode == 0
    assert [t.name for t in load_policy(policy).tenants] == ["carol"]
    assert policy.stat().st_mode & 0o777 == 0o640
    assert _keys("revoke", "--config", str(policy), "--name", "carol").returncode == 0
    assert load_policy(policy).tenants == []


def test_concurrent_edits_lose_nothing(policy: Path) -> None:
    names = [f"tenant-{i}" for i in range(6)]
    with ThreadPoolExecutor(len(names)) as pool:
        results = list(pool.map(lambda n: _keys("add", "--config", str(policy), "--name", n, "--org", n), names))
    assert [r.returncode for r in results] == [0] * len(names), [r.stderr for r in results]
    tenants = {t.name: t.key_sha256 for t in load_policy(policy).tenants}
    for name, result in zip(names, results, strict=True):
        assert tenants[name] == hash_api_key(result.stdout.strip())


def test_a_running_gateway_takes_keys_on_reload(tmp_path: Path) -> None:
    backend = FakeBackend("keys-backend")
    policy = {
        "gateway": {"audit_log": f"sqlite:///{tmp_path}/audit.db", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "fake", "url": backend.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [],
    }
    gw = Gateway(policy, tmp_path)
    try:
        def ask(key: str) -> int:
            return httpx.post(gw.url + "/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=30,
                              json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}).status_code

        def reload_to(generation: int) -> None:
            gw.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while httpx.get(gw.root + "/health", timeout=10).json()["policy"]["generation"] != generation:
                assert time.monotonic() < deadline
                time.sleep(0.05)

        added = _keys("add", "--config", str(gw.config), "--name", "carol", "--org", "initech")
        key = added.stdout.strip()
        assert ask(key) == 401  # not before the reload
        reload_to(2)
        assert ask(key) == 200
        assert _keys("revoke", "--config", str(gw.config), "--name", "carol").returncode == 0
        reload_to(3)
        assert ask(key) == 401
    finally:
        gw.stop()
        backend.stop()
