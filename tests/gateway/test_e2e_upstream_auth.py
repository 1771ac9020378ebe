"""A backend that refuses the gateway's upstream credential: the caller learns it is not its own key.

The caller's gateway key is never forwarded, so an upstream 401/403 is always about the credential
the gateway holds for that backend. Relayed as 401, the official client raises AuthenticationError
and the caller blames a key that works.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import REPO, FakeBackend, Gateway

KEY = "kvf-gw-upstream-auth-key"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeBackend, Gateway, Path]]:
    backend = FakeBackend("hosted")
    tmp = tmp_path_factory.mktemp("gw-upstream-auth")
    audit = tmp / "audit.db"
    gateway = Gateway({
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "hosted", "url": backend.url, "tier": "shared", "capacity": "policy"}],
        "tenants": [{"name": "t", "key_sha256": hash_api_key(KEY), "organization": "acme", "default_class": "public"}],
    }, tmp, env={"PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])})  # this checkout's code
    yield backend, gateway, audit
    gateway.stop()
    backend.stop()


@pytest.mark.parametrize("upstream_status", [401, 403])
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_auth_refusal_is_a_502_naming_the_gateway(setup: tuple[FakeBackend, Gateway, Path],
                                                          upstream_status: int, stream: bool) -> None:
    backend, gateway, audit = setup
    backend.control(status=upstream_status)
    client = openai.OpenAI(base_url=gateway.url, api_key=KEY, max_retries=0)
    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(model="m", stream=stream, messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 502
    body = err.value.body
    assert isinstance(body, dict) and body["code"] == "upstream_auth_failed"
    assert "not your API key" in body["message"] and "failing on purpose" not in body["message"]
    backend.control(status=200)
    assert client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
    deadline = time.monotonic() + 10  # the audit log is written by a background thread
    while time.monotonic() < deadline:
        rows = sqlite3.connect(audit).execute(
            "select status, reason from gateway_decisions where reason like 'upstream HTTP %'").fetchall()
        if (502, f"upstream HTTP {upstream_status}") in rows:
            return
        time.sleep(0.2)
    raise AssertionError(f"no audit row for the refusal: {rows}")
