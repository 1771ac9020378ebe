"""Attack across workers with the built-in canary: tenant A's request goes through worker 0, which
injects A's derived canary; a leaking backend then puts that canary into tenant B's answer, served by
worker 1. Worker 1 never injected A's canary, yet it must withhold the answer and name A as the owner
(every worker derives every tenant's canary from the shared gateway secret at start-up)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.gateway.tenants import hash_api_key
from tests.gateway.protection.test_e2e_protection import LeakyBackend
from tests.gateway.test_e2e_workers import _start, _stop, connection_on

KEYS = {org: f"kvf-gw-workers-canary-{org}-key" for org in ("acme", "globex")}


@pytest.fixture(scope="module")
def leaky() -> Iterator[LeakyBackend]:
    b = LeakyBackend()
    yield b
    b.stop()


@pytest.mark.redis
@pytest.mark.parametrize("stream", [False, True])
def test_a_canary_injected_by_one_worker_is_owned_in_the_other(leaky: LeakyBackend, redis_url: str,
                                                               tmp_path: Path, stream: bool) -> None:
    audit = tmp_path / "audit.db"
    policy = {
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0,
                    "protection": {"leak": {"index": "redis", "redis_url": redis_url, "window_s": 600,
                                            "canaries": True,
                                            "redis_prefix": f"kvfence-workers-canary-{stream}:"}}},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "leaky", "url": leaky.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [{"name": f"{org}-key", "key_sha256": hash_api_key(KEYS[org]), "organization": org,
                     "default_class": "internal"} for org in KEYS],
    }
    gw = _start(policy, tmp_path, env={"KVFENCE_GATEWAY_SECRET": "workers-canary-secret-0123456789"})
    try:
        with connection_on(gw, 0) as first, connection_on(gw, 1) as second:
            leaky.mode("benign")
            acme = openai.OpenAI(base_url=gw.url, api_key=KEYS["acme"], max_retries=0, http_client=first)
            acme.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello there."}])
            sent = leaky.received()[-1]
            assert "kvfc-" in json.dumps(sent["messages"])  # worker 0 injected acme's canary
            leaky.mode("leak_canary")  # the next answer, whoever asks, carries acme's canary
            globex = openai.OpenAI(base_url=gw.url, api_key=KEYS["globex"], max_retries=0, http_client=second)
            with pytest.raises(openai.APIError) as caught:
                answer = globex.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Any news today?"}], stream=stream)
                if stream:
                    text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices)  # type: ignore[union-attr]
                    assert "kvfc-" not in text
            if not stream:
                assert isinstance(caught.value, openai.APIStatusError) and caught.value.status_code == 502
            leaky.mode("benign")
    finally:
        _stop(gw)
    rows = sqlite3.connect(audit).execute("SELECT tenants, details FROM gateway_incidents").fetchall()
    assert len(rows) == 1
    tenants, details = json.loads(rows[0][0]), json.loads(rows[0][1])
    assert details["detector"] == "canary"
    assert "unknown" not in tenants and "acme" in " ".join(tenants) and "globex" in " ".join(tenants)


def test_a_fresh_book_names_the_owner_of_a_canary_another_book_derived() -> None:
    from kvfence.gateway.protection.leak import CanaryBook

    injecting = CanaryBook(b"k" * 32, derive_for=["acme", "globex"])
    canary = injecting.derived("acme")
    other_worker = CanaryBook(b"k" * 32, derive_for=["acme", "globex"])
    assert set(other_worker.foreign_in(f"text {canary} text", "globex")) == {"acme"}
    assert other_worker.foreign_in(f"text {canary} text", "acme") == []  # one's own is no leak
    no_units = CanaryBook(b"k" * 32)
    assert no_units.foreign_in(canary, "globex") == ["unknown"]  # still caught, owner not derivable
    wrong_key = CanaryBook(b"x" * 32, derive_for=["acme"])
    assert wrong_key.foreign_in(canary, "globex") == ["unknown"]
