"""Attacks across workers: tenant A's request goes through worker 0, tenant B's answer through worker 1,
and a leaking backend puts A's material into B's answer. Worker 1 must withhold it and name A:

- ``prompt``: the answer is generated over A's prompt. The workers share the fingerprint index in Redis
  (one worker's memory would not know the other's prompts).
- ``canary``: the answer carries the built-in canary worker 0 injected into A's request (``canary_disguised``:
  in lower case, a space between its characters). Worker 1 never
  injected it, yet names A as its owner: every worker derives every tenant's canary from the shared
  gateway secret at start-up."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from kvfence.gateway.protection.leak.scan import CanaryBook
from tests.gateway.protection.test_e2e_protection import LeakyBackend
from tests.gateway.test_e2e_workers import _start, _stop, connection_on

KEYS = {org: f"kvf-gw-workers-leak-{org}-key" for org in ("acme", "globex")}
SECRET_PROMPT = ("Board memo: Vandermolen Shipping will close its Rotterdam terminal on the ninth of May and "
                 "move four hundred jobs to Gdansk, not yet told to the works council.")
# per attack: A's prompt, the backend's mode for B's answer, a string B must never see, leak options
ATTACKS = {
    "prompt": (SECRET_PROMPT, "leak", "Gdansk", {}),
    "canary": ("Hello there.", "leak_canary", "kvfc-", {"canaries": True}),
    # issue 16, 5: the same canary in lower case with a space between its characters
    "canary_disguised": ("Hello there.", "leak_canary_disguised", "k v f c", {"canaries": True}),
}


@pytest.fixture(scope="module")
def leaky() -> Iterator[LeakyBackend]:
    b = LeakyBackend()
    yield b
    b.stop()


@pytest.mark.redis
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_leak_across_two_workers_is_withheld(leaky: LeakyBackend, redis_url: str, tmp_path: Path,
                                               attack: str, stream: bool) -> None:
    prompt, leak_mode, never_shown, leak_options = ATTACKS[attack]
    audit = tmp_path / "audit.db"
    policy = {
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0,
                    "protection": {"leak": {"index": "redis", "redis_url": redis_url, "window_s": 600,
                                            "redis_prefix": f"kvfence-workers-{attack}-{stream}:",
                                            **leak_options}}},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "leaky", "url": leaky.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [{"name": f"{org}-key", "key_sha256": hash_api_key(KEYS[org]), "organization": org,
                     "default_class": "internal"} for org in KEYS],
    }
    gw = _start(policy, tmp_path, env={"KVFENCE_GATEWAY_SECRET": "workers-shared-secret-0123456789"})
    try:
        with connection_on(gw, 0) as first, connection_on(gw, 1) as second:
            leaky.mode("benign")
            acme = openai.OpenAI(base_url=gw.url, api_key=KEYS["acme"], max_retries=0, http_client=first)
            acme.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
            if attack.startswith("canary"):
                assert "kvfc-" in json.dumps(leaky.received()[-1]["messages"])  # worker 0 injected it
            leaky.mode(leak_mode)  # the next answer, whoever asks, carries acme's material
            globex = openai.OpenAI(base_url=gw.url, api_key=KEYS["globex"], max_retries=0, http_client=second)
            with pytest.raises(openai.APIError) as caught:
                answer = globex.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Any news today?"}], stream=stream)
                if stream:
                    text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices)  # type: ignore[union-attr]
                    assert never_shown not in text
            if not stream:
                assert isinstance(caught.value, openai.APIStatusError) and caught.value.status_code == 502
            leaky.mode("benign")
    finally:
        _stop(gw)
    rows = sqlite3.connect(audit).execute("SELECT tenants, details FROM gateway_incidents").fetchall()
    assert len(rows) == 1
    tenants = " ".join(json.loads(rows[0][0]))
    assert "acme" in tenants and "globex" in tenants
    if attack == "canary":
        assert json.loads(rows[0][1])["detector"] == "canary"
        assert "unknown" not in json.loads(rows[0][0])


def test_a_fresh_book_names_the_owner_of_a_canary_another_book_derived() -> None:
    injecting = CanaryBook(b"k" * 32, derive_for=["acme", "globex"])
    canary = injecting.derived("acme")
    other_worker = CanaryBook(b"k" * 32, derive_for=["acme", "globex"])
    assert set(other_worker.foreign_in(f"text {canary} text", "globex")) == {"acme"}
