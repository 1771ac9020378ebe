"""End to end, a hostile or careless client against the gateway's admission: client cache salts in
every disguise never reach the backend (only the gateway's per-scope salt does, stable and different
per workspace); ``X-Data-Class`` given twice or as a list takes the most sensitive class, never a
lower one, and an unknown name is a 400; a detector finding raises the class even when the message
it was in is then trimmed. Raw ``httpx`` requests, so the bytes are exactly what an attacker sends."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key
from tests.gateway.conftest import FakeBackend, Gateway

SECRET = "test-gateway-secret-admission-0123456789"
KEYS = {name: f"kvf-gw-adm-{name}-key" for name in ("eng", "sales", "other")}


def policy(shared: FakeBackend, dedicated: FakeBackend, audit: Path) -> dict[str, Any]:
    def tenant(name: str, org: str, workspace: str) -> dict[str, Any]:
        return {"name": name, "key_sha256": hash_api_key(KEYS[name]), "organization": org, "workspace": workspace,
                "default_class": "public"}

    return {
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0, "load_protection": True,
                    "protection": {"raise_class": {"US_SSN": "restricted"}}},
        "data_classes": [
            {"name": "public", "allowed_tiers": ["shared", "dedicated"]},
            {"name": "internal", "allowed_tiers": ["dedicated"]},
            {"name": "restricted", "allowed_tiers": ["dedicated"], "max_prompt_tokens": 200,
             "over_cap": {"action": "trim"}},
        ],
        "backends": [
            {"name": "shared", "url": shared.url, "tier": "shared", "accepts_cache_salt": True, "priority": 0,
             "capacity": "policy", "facts": {"cache_scope": "global"}},
            {"name": "dedicated", "url": dedicated.url, "tier": "dedicated", "priority": 1, "capacity": "policy"},
        ],
        "tenants": [tenant("eng", "acme", "eng"), tenant("sales", "acme", "sales"), tenant("other", "globex", "w")],
    }


@pytest.fixture(scope="module")
def shared() -> Iterator[FakeBackend]:
    b = FakeBackend("adm-shared")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def dedicated() -> Iterator[FakeBackend]:
    b = FakeBackend("adm-dedicated")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def gateway(shared: FakeBackend, dedicated: FakeBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw-adm")
    gw = Gateway(policy(shared, dedicated, tmp / "audit.db"), tmp, env={"KVFENCE_GATEWAY_SECRET": SECRET})
    yield gw
    gw.stop()


def post(gw: Gateway, tenant: str, body: dict[str, Any], headers: list[tuple[str, str]] = ()) -> httpx.Response:  # type: ignore[assignment]
    base = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(gw.url + "/chat/completions", json={**base, **body},
                      headers=[("authorization", f"Bearer {KEYS[tenant]}"), *headers], timeout=30)


def expected_salt(org: str, workspace: str, name: str) -> str:
    key = compute_scope_key(TenantIdentity(org, workspace, name), CacheScope.WORKSPACE, SECRET.encode())
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


@pytest.mark.parametrize("client_salt", [
    {"cache_salt": "guessable"},
    {"extra_body": {"cache_salt": "guessable"}},  # a raw body that kept the SDK's wrapper
    {"extra_body": {"extra_body": {"prompt_cache_key": "guessable"}}},
    {"Cache_Salt": "guessable"}, {"CACHE-SALT": "guessable"}, {"cacheSalt": "guessable"},
    {"prompt_cache_key": "guessable"}, {"PromptCacheKey": "guessable"},
])
def test_no_client_salt_reaches_the_backend(gateway: Gateway, shared: FakeBackend,
                                            client_salt: dict[str, Any]) -> None:
    shared.clear()
    answer = post(gateway, "eng", client_salt)
    if answer.status_code == 400:  # refused by the request allowlist (api/): nothing was forwarded
        assert shared.received() == []
        return
    assert answer.status_code == 200 and "cache_salt" in client_salt  # the one known name: replaced
    sent = shared.received()[-1]["body"]
    assert "guessable" not in str(sent)
    assert sent["cache_salt"] == expected_salt("acme", "eng", "eng")


def test_injected_salt_is_stable_and_differs_per_scope(gateway: Gateway, shared: FakeBackend) -> None:
    shared.clear()
    for name in ("eng", "eng", "sales", "other"):
        assert post(gateway, name, {"cache_salt": "same-for-all"}).status_code == 200
    salts = [r["body"]["cache_salt"] for r in shared.received()]
    assert salts[0] == salts[1]  # stable
    assert len({salts[1], salts[2], salts[3]}) == 3  # another workspace, another organisation


@pytest.mark.parametrize(("headers", "klass"), [
    ([("X-Data-Class", "internal")], "internal"),
    ([("X-Data-Class", "public"), ("X-Data-Class", "internal")], "internal"),  # the second header counts
    ([("X-Data-Class", "internal"), ("x-data-class", "public")], "internal"),  # a later lower one does not lower
    ([("X-Data-Class", "public, internal")], "internal"),
    ([("X-Data-Class", "public,")], "public"),
])
def test_data_class_header_can_only_raise(gateway: Gateway, dedicated: FakeBackend,
                                          headers: list[tuple[str, str]], klass: str) -> None:
    answer = post(gateway, "eng", {}, headers)
    assert answer.status_code == 200
    assert answer.headers["x-kvfence-data-class"] == klass
    assert answer.headers["x-kvfence-backend"] == ("dedicated" if klass != "public" else "shared")


@pytest.mark.parametrize("value", ["secret-class", "public, nope", "INTERNAL"])
def test_unknown_class_names_are_refused(gateway: Gateway, value: str) -> None:
    answer = post(gateway, "eng", {}, [("X-Data-Class", value)])
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "X-Data-Class"


def test_a_finding_raises_the_class_even_when_its_message_is_trimmed(gateway: Gateway,
                                                                     dedicated: FakeBackend) -> None:
    dedicated.clear()
    messages = [
        {"role": "user", "content": "summarise the payroll export"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "export", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "employee SSN 536-22-1234 " + "filler row " * 200},
        {"role": "user", "content": "thanks, what is the payroll total?"},
    ]
    answer = post(gateway, "eng", {"messages": messages})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-kvfence-data-class"] == "restricted"
    assert answer.headers["x-kvfence-backend"] == "dedicated"
    assert int(answer.headers["x-kvfence-tokens-trimmed"]) > 0
    assert "536-22-1234" not in str(dedicated.received()[-1]["body"])
