"""`kvfence gateway` command line: check (with the routing table), keys, start-up configuration errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvfence.errors import ConfigError
from kvfence.gateway.cli import gateway
from kvfence.gateway.policy.loader import load_policy
from kvfence.gateway.policy.tenants import hash_api_key
from kvfence.gateway.runtime import GatewayRuntime
from tests.gateway.conftest import KVFENCE

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway.yaml"


def test_check_prints_the_routing_table() -> None:
    result = CliRunner().invoke(gateway, ["check", "--routes", str(SAMPLE)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    hr = lines.index(next(line for line in lines if line.startswith("tenant acme-hr ")))
    assert "hr             -> acme-hr-dedicated" in lines[hr + 5]
    assert any("internal       -> shared-vllm" in line for line in lines)


def test_check_refuses_a_bad_policy_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SAMPLE.read_text().replace("tier: shared", "tier: cloud", 1))
    proc = subprocess.run([KVFENCE, "gateway", "check", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "bad.yaml:" in proc.stderr and "tier" in proc.stderr and "Traceback" not in proc.stderr


def test_new_key_and_hash_key() -> None:
    runner = CliRunner()
    out = runner.invoke(gateway, ["new-key"]).output
    key = out.split("api key:")[1].split()[0]
    digest = out.split("key_sha256:")[1].split()[0]
    assert hash_api_key(key) == digest
    assert runner.invoke(gateway, ["hash-key", key]).output.strip() == digest


def test_missing_secret_and_credentials_are_named(tmp_path: Path) -> None:
    policy = load_policy(SAMPLE)
    with pytest.raises(ConfigError, match="KVFENCE_GATEWAY_SECRET is not set"):
        GatewayRuntime.create(policy, env={}, audit_url=f"sqlite:///{tmp_path}/a.db", hooks=[])
    with pytest.raises(ConfigError, match=r"backends\[0\] \(hosted-shared\)\.auth\.api_key_env: .*HOSTED_API_KEY"):
        GatewayRuntime.create(policy, env={"KVFENCE_GATEWAY_SECRET": "x" * 32},
                              audit_url=f"sqlite:///{tmp_path}/a.db", hooks=[])


def test_run_without_config_is_a_usage_error() -> None:
    result = CliRunner().invoke(gateway, [])
    assert result.exit_code == 2 and "--config" in result.output


def test_a_port_in_use_is_one_error_line_with_exit_2(tmp_path: Path) -> None:
    import os
    import socket

    env = {**os.environ, "KVFENCE_GATEWAY_SECRET": "x" * 32, "HOSTED_API_KEY": "k",
           "ACME_DEDICATED_KEY": "k", "GLOBEX_DEDICATED_KEY": "k"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([KVFENCE, "gateway", "--config", str(SAMPLE), "--port", str(port),
                               "--audit-log", f"sqlite:///{tmp_path}/a.db"],
                              capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}: the address is already in use" in proc.stderr
    assert "Traceback" not in proc.stderr
