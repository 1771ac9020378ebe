"""Attack across workers: tenant A's prompt goes through worker 0, tenant B's answer (generated over A's
prompt by a leaking backend) through worker 1. The leak must still be withheld: the workers share the
fingerprint index in Redis (one worker's memory would not know the other's prompts)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.gateway.tenants import hash_api_key
from tests.gateway.protection.test_e2e_protection import LeakyBackend
from tests.gateway.test_e2e_workers import _start, _stop, connection_on

KEYS = {org: f"kvf-gw-workers-leak-{org}-key" for org in ("acme", "globex")}


@pytest.fixture(scope="module")
def leaky() -> Iterator[LeakyBackend]:
    b = LeakyBackend()
    yield b
    b.stop()


@pytest.mark.redis
@pytest.mark.parametrize("stream", [False, True])
def test_a_leak_across_two_workers_is_withheld(leaky: LeakyBackend, redis_url: str, tmp_path: Path,
                                               stream: bool) -> None:
    audit = tmp_path / "audit.db"
    policy = {
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0,
                    "protection": {"leak": {"index": "redis", "redis_url": redis_url, "window_s": 600,
                                            "redis_prefix": f"kvfence-workers-leak-{stream}:"}}},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "leaky", "url": leaky.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [{"name": f"{org}-key", "key_sha256": hash_api_key(KEYS[org]), "organization": org,
                     "default_class": "internal"} for org in KEYS],
    }
    gw = _start(policy, tmp_path, env={"KVFENCE_GATEWAY_SECRET": "workers-shared-secret-0123456789"})
    try:
        secret = ("Board memo: Vandermolen Shipping will close its Rotterdam terminal on the ninth of May and "
                  "move four hundred jobs to Gdansk, not yet told to the works council.")
        with connection_on(gw, 0) as first, connection_on(gw, 1) as second:
            leaky.mode("benign")
            acme = openai.OpenAI(base_url=gw.url, api_key=KEYS["acme"], max_retries=0, http_client=first)
            acme.chat.completions.create(model="m", messages=[{"role": "user", "content": secret}])
            leaky.mode("leak")  # the next answer, whoever asks, is generated over acme's prompt
            globex = openai.OpenAI(base_url=gw.url, api_key=KEYS["globex"], max_retries=0, http_client=second)
            with pytest.raises(openai.APIError) as caught:
                answer = globex.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Any news today?"}], stream=stream)
                if stream:
                    text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices)  # type: ignore[union-attr]
                    assert "Gdansk" not in text
            if not stream:
                assert isinstance(caught.value, openai.APIStatusError) and caught.value.status_code == 502
            leaky.mode("benign")
    finally:
        _stop(gw)
    rows = sqlite3.connect(audit).execute("SELECT tenants FROM gateway_incidents").fetchall()
    assert rows and "acme" in rows[0][0] and "globex" in rows[0][0]
