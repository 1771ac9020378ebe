"""Through a real ``kvfence gateway`` process with protection on, the official ``openai`` client as
the caller, and a backend process that can be made to leak the previous request's prompt."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner

from kvfence.gateway.cli import gateway as gateway_cli
from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway, Process
from tests.netutil import free_port

TENANTS = ["acme", "globex", *[f"org{i}" for i in range(18)]]
KEYS = {org: f"kvf-gw-test-{org}-key" for org in TENANTS}


class LeakyBackend(Process):
    def __init__(self) -> None:
        port = free_port()
        super().__init__([sys.executable, "-m", "tests.gateway.protection.leaky_backend", "--port", str(port)], port)
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + "/v1"

    def mode(self, mode: str) -> None:
        httpx.post(self.root + "/_mode", json={"mode": mode}).raise_for_status()

    def received(self) -> list[dict[str, Any]]:
        return list(httpx.get(self.root + "/_received").json())


@pytest.fixture(scope="module")
def backend() -> Iterator[LeakyBackend]:
    b = LeakyBackend()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def audit_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('prot-audit') / 'audit.db'}"


@pytest.fixture(scope="module")
def gw(backend: LeakyBackend, audit_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    policy = {
        "gateway": {"audit_log": audit_url, "capacity_refresh_s": 0,
                    "protection": {"leak": {"window_s": 600}}},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]},
                         {"name": "restricted", "allowed_tiers": ["shared"], "protection": {"pii": "block"}}],
        "backends": [{"name": "leaky", "url": backend.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [{"name": f"{org}-key", "key_sha256": hash_api_key(KEYS[org]), "organization": org,
                     "default_class": "internal"} for org in TENANTS],
    }
    g = Gateway(policy, tmp_path_factory.mktemp("prot-gw"), env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield g
    g.stop()


def client(gw: Gateway, org: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=KEYS[org], max_retries=0, timeout=30)


def chat(gw: Gateway, org: str, text: str, stream: bool = False) -> str:
    c = client(gw, org)
    try:
        if not stream:
            out = c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
            return out.choices[0].message.content or ""
        parts = []
        for chunk in c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        return "".join(parts)
    finally:
        c.close()


@pytest.mark.parametrize("stream", [False, True])
def test_personal_data_never_reaches_the_backend_and_is_restored(gw: Gateway, backend: LeakyBackend,
                                                                 stream: bool) -> None:
    backend.mode("echo")
    text = "Write to maria.lopez@northwind.com or call (415) 555-0132; key ghp_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u"
    answer = chat(gw, "acme", text, stream=stream)
    sent = backend.received()[-1]["messages"][-1]["content"]
    assert "maria.lopez" not in sent and "555-0132" not in sent and "ghp_" not in sent
    assert "<EMAIL_1>" in sent and "<PHONE_1>" in sent and "<GITHUB_TOKEN_1>" in sent
    assert answer == text.replace("ghp_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u", "<GITHUB_TOKEN_1>")


def test_another_tenants_prompt_in_an_answer_is_withheld(gw: Gateway, backend: LeakyBackend, audit_url: str) -> None:
    backend.mode("benign")
    secret = ("Confidential: Halvorsen Maritime will acquire Tideline Logistics for four hundred million euros, "
              "announcement planned after the board meeting on the third of March.")
    chat(gw, "acme", secret)
    backend.mode("leak")  # the next answer is generated over acme's prompt
    with pytest.raises(openai.APIStatusError) as caught:
        chat(gw, "globex", "What is the capital of Portugal?")
    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and body.get("code") == "cross_tenant_leak_suspected"
    chat(gw, "acme", secret)  # prime 'previous' again
    received: list[str] = []
    c = client(gw, "globex")
    try:
        with pytest.raises(openai.APIError):
            for chunk in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "And of Spain?"}],
                                                   stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    received.append(chunk.choices[0].delta.content)
    finally:
        c.close()
    assert "Tideline" not in "".join(received)  # what went out before the stream was stopped carries no leak
    runner = CliRunner()
    listed = runner.invoke(gateway_cli, ["incidents", "list", "--audit-log", audit_url])
    assert listed.exit_code == 0 and "globex, acme" in listed.output, listed.output
    incident_id = listed.output.split()[0]
    notice = runner.invoke(gateway_cli, ["incidents", "show", incident_id, "--audit-log", audit_url, "--notice"])
    assert "may have been exposed: acme" in notice.output and "Tideline" not in notice.output
    metrics = httpx.get(gw.root + "/metrics").text
    assert 'kvfence_gateway_protection_leak_detections_total{detector="ngram"} 2.0' in metrics


def test_benign_traffic_from_many_tenants_raises_no_alarm(gw: Gateway, backend: LeakyBackend) -> None:
    backend.mode("benign")
    topics = ["invoice", "shipping delay", "password reset", "contract renewal", "refund", "onboarding"]
    for i in range(120):
        org = TENANTS[i % len(TENANTS)]
        topic = topics[i % len(topics)]
        text = (f"Hello, I have a question about my {topic}. Please let me know if you need more details. "
                f"Reference {i * 7919 % 100000}, sent by {org}.")
        chat(gw, org, text, stream=i % 2 == 0)  # raises on a false alarm


def test_block_action_is_a_400(gw: Gateway) -> None:
    c = openai.OpenAI(base_url=gw.url, api_key=KEYS["acme"], max_retries=0,
                      default_headers={"X-Data-Class": "restricted"})
    with pytest.raises(openai.BadRequestError) as caught:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "mail bo@acme.io"}])
    c.close()
    assert "EMAIL_ADDRESS" in str(caught.value)


@pytest.mark.redis
def test_two_replicas_share_the_fingerprint_index_in_redis(backend: LeakyBackend, redis_url: str,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    policy = {
        "gateway": {"audit_log": f"sqlite:///{tmp_path_factory.mktemp('replica-audit') / 'audit.db'}",
                    "capacity_refresh_s": 0,
                    "protection": {"leak": {"index": "redis", "redis_url": redis_url,
                                            "redis_prefix": "kvfence-e2e-replicas:"}}},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "leaky", "url": backend.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [{"name": f"{org}-key", "key_sha256": hash_api_key(KEYS[org]), "organization": org,
                     "default_class": "internal"} for org in ("acme", "globex")],
    }
    env = {"KVFENCE_GATEWAY_SECRET": "replica-shared-secret-0123456789"}
    replica1 = Gateway(policy, tmp_path_factory.mktemp("replica1"), env=env)
    replica2 = Gateway(policy, tmp_path_factory.mktemp("replica2"), env=env)
    try:
        backend.mode("benign")
        secret = ("Payroll export for March: the head of sales Ingrid Solberg receives a retention bonus of "
                  "ninety thousand kroner, approved by the board, not yet announced to the team.")
        chat(replica1, "acme", secret)
        backend.mode("leak")
        with pytest.raises(openai.APIStatusError) as caught:
            chat(replica2, "globex", "Any news today?")
        assert caught.value.status_code == 502
    finally:
        replica1.stop()
        replica2.stop()
