"""End to end: the official ``openai`` client -> ``kvfence gateway`` process -> two backend processes."""

from __future__ import annotations

import base64
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key
from tests.gateway.conftest import FakeBackend, Gateway
from tests.netutil import free_port

SECRET = "test-gateway-secret-0123456789abcdef"
KEYS = {name: f"kvf-gw-test-{name}-key" for name in ("alice", "alice2", "bob", "limited", "carol")}
UPSTREAM_ACME = "sk-upstream-acme-1234"


def make_policy(a: FakeBackend, b: FakeBackend, audit: Path, http_client: str = "auto") -> dict[str, Any]:
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: a backend that is down
    policy = {
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0, "backend_retry_after_s": 30,
                    "load_protection": False, "hooks": ["tests.gateway.sample_hooks:build"],
                    "max_body_bytes": 200_000},
        "advisories": [{"engine": "vllm", "fixed_in": "0.9.0", "id": "CVE-2025-46570"}],
        "data_classes": [
            {"name": "public", "allowed_tiers": ["shared", "dedicated", "on_prem"]},
            {"name": "internal", "allowed_tiers": ["shared", "dedicated", "on_prem"],
             "requires": {"max_cache_scope": "workspace"}},
            {"name": "confidential", "allowed_tiers": ["dedicated", "on_prem"],
             "requires": {"max_retention_days": 0, "no_advisory_engine": True},
             "over_cap": {"action": "trim", "retrieved_names": ["doc-*"]}},
            {"name": "restricted", "allowed_tiers": ["on_prem"]},
            {"name": "sealed", "allowed_tiers": ["on_prem"], "requires": {"max_retention_days": 0}},
        ],
        "backends": [
            {"name": "shared-a", "url": a.url, "tier": "shared", "accepts_cache_salt": True, "priority": 0,
             "facts": {"cache_scope": "global", "retention_days": 0, "engine": "kvfence", "engine_version": "0.1.0"}},
            {"name": "dedicated-down", "url": closed, "tier": "dedicated", "priority": 1, "capacity": "policy",
             "facts": {"cache_scope": "none", "retention_days": 0, "engine": "vllm", "engine_version": "0.9.2"}},
            {"name": "dedicated-b", "url": b.url, "tier": "dedicated", "priority": 2, "dedicated_to": ["acme"],
             "facts": {"cache_scope": "account", "retention_days": 0, "engine": "vllm", "engine_version": "0.9.2"},
             "auth": {"per_organization": {"acme": "UPSTREAM_ACME_KEY"}}},
            {"name": "onprem-down", "url": closed, "tier": "on_prem", "capacity": "policy"},
        ],
        "tenants": [
            {"name": "alice", "key_sha256": hash_api_key(KEYS["alice"]), "organization": "acme",
             "workspace": "eng", "default_class": "public"},
            {"name": "alice2", "key_sha256": hash_api_key(KEYS["alice2"]), "organization": "acme",
             "workspace": "sales", "default_class": "public"},
            {"name": "bob", "key_sha256": hash_api_key(KEYS["bob"]), "organization": "globex",
             "default_class": "internal"},
            {"name": "limited", "key_sha256": hash_api_key(KEYS["limited"]), "organization": "acme",
             "workspace": "ops", "default_class": "public", "limits": {"requests_per_minute": 3}},
            {"name": "carol", "key_sha256": hash_api_key(KEYS["carol"]), "organization": "acme",
             "workspace": "legal", "default_class": "confidential", "limits": {"max_prompt_tokens": 300}},
        ],
    }
    for backend in policy["backends"]:
        backend["http_client"] = http_client
    return policy


# Every test runs through both upstream clients: the lean HTTP/1.1 one the gateway uses for http://
# backends ("auto") and httpx, which https backends use.
@pytest.fixture(scope="module", params=["auto", "httpx"])
def http_client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory, http_client: str) -> Path:
    return tmp_path_factory.mktemp("gw-audit") / "audit.db"


@pytest.fixture(scope="module")
def gateway(backend_a: FakeBackend, backend_b: FakeBackend, audit_path: Path, http_client: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw")
    gw = Gateway(make_policy(backend_a, backend_b, audit_path, http_client), tmp,
                 env={"KVFENCE_GATEWAY_SECRET": SECRET, "UPSTREAM_ACME_KEY": UPSTREAM_ACME})
    yield gw
    while _OPEN_CLIENTS:
        _OPEN_CLIENTS.pop().close()
    gw.stop()


_OPEN_CLIENTS: list[openai.OpenAI] = []


def client(gw: Gateway, tenant: str, **headers: str) -> openai.OpenAI:
    c = openai.OpenAI(base_url=gw.url, api_key=KEYS[tenant], max_retries=0, default_headers=headers or None)
    _OPEN_CLIENTS.append(c)
    return c


def chat(c: openai.OpenAI, text: str, **kw: Any) -> Any:
    return c.chat.completions.with_raw_response.create(
        model="test-model", messages=[{"role": "user", "content": text}], **kw)


def test_public_request_goes_to_the_shared_backend(gateway: Gateway, backend_a: FakeBackend) -> None:
    raw = chat(client(gateway, "alice"), "hi there")
    answer = raw.parse()
    assert answer.choices[0].message.content == "hello from shared-a"
    assert raw.headers["x-kvfence-backend"] == "shared-a"
    assert raw.headers["x-kvfence-data-class"] == "public"
    assert float(raw.headers["x-kvfence-overhead-ms"]) >= 0


def test_streaming_chat_and_completions(gateway: Gateway) -> None:
    c = client(gateway, "alice")
    stream = c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}],
                                       stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == "hello from shared-a"
    text = c.completions.create(model="test-model", prompt="once upon").choices[0].text
    assert text == "hello from shared-a"
    streamed = c.completions.create(model="test-model", prompt="once upon", stream=True)
    assert "".join(ch.choices[0].text for ch in streamed) == "hello from shared-a"


def test_header_raises_class_and_falls_back_to_an_allowed_backend(gateway: Gateway, backend_b: FakeBackend) -> None:
    backend_b.clear()
    raw = chat(client(gateway, "alice", **{"X-Data-Class": "confidential"}), "board minutes")
    assert raw.parse().choices[0].message.content == "hello from dedicated-b"
    # dedicated-down has the better priority but is down: fallback to the other allowed backend
    assert raw.headers["x-kvfence-backend"] == "dedicated-b"
    assert raw.headers["x-kvfence-data-class"] == "confidential"
    seen = backend_b.received()[-1]
    # the upstream saw the organisation's own upstream credential, never the caller's gateway key
    assert seen["headers"]["authorization"] == f"Bearer {UPSTREAM_ACME}"
    assert KEYS["alice"] not in str(seen)


def test_hook_finding_raises_class_and_changes_route(gateway: Gateway) -> None:
    raw = chat(client(gateway, "alice"), "notes on the MERGER with initech")
    assert raw.headers["x-kvfence-data-class"] == "confidential"
    assert raw.headers["x-kvfence-backend"] == "dedicated-b"


def test_header_cannot_lower_the_class(gateway: Gateway) -> None:
    raw = chat(client(gateway, "bob", **{"X-Data-Class": "public"}), "hello")
    assert raw.headers["x-kvfence-data-class"] == "internal"


def test_unknown_class_header_is_a_400(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError, match="unknown data class"):
        chat(client(gateway, "alice", **{"X-Data-Class": "topsecret"}), "hello")


def test_fail_closed_when_the_only_allowed_backend_is_down(gateway: Gateway, backend_a: FakeBackend,
                                                           backend_b: FakeBackend) -> None:
    backend_a.clear()
    backend_b.clear()
    with pytest.raises(openai.InternalServerError) as err:
        chat(client(gateway, "alice", **{"X-Data-Class": "restricted"}), "salary table")
    assert err.value.status_code == 503
    assert "onprem-down" in str(err.value) and "failing closed" in str(err.value)
    assert backend_a.received() == [] and backend_b.received() == []  # nothing went anywhere else


def test_no_allowed_backend_is_a_403_naming_the_reasons(gateway: Gateway, backend_a: FakeBackend) -> None:
    backend_a.clear()
    with pytest.raises(openai.PermissionDeniedError) as err:
        chat(client(gateway, "alice", **{"X-Data-Class": "sealed"}), "privileged")
    message = str(err.value)
    assert "prompt retention unknown" in message and "tier shared not allowed" in message
    assert backend_a.received() == []


def test_dedicated_backend_refuses_other_organisations(gateway: Gateway, backend_b: FakeBackend) -> None:
    # bob (globex) may not use acme's dedicated backend; the only other dedicated one is down
    backend_b.clear()
    with pytest.raises(openai.InternalServerError) as err:
        chat(client(gateway, "bob", **{"X-Data-Class": "confidential"}), "hello")
    assert "dedicated-b: not allowed (dedicated to other tenants)" in str(err.value)
    assert backend_b.received() == []


def test_over_capacity_prompt_is_rejected_before_forwarding(gateway: Gateway, backend_a: FakeBackend) -> None:
    backend_a.clear()
    long_prompt = "word " * 2000  # ~3,300 approximate tokens: under the advertised 4096, over the 1024 held
    with pytest.raises(openai.BadRequestError) as err:
        chat(client(gateway, "bob"), long_prompt, max_tokens=16)
    assert err.value.code == "context_length_exceeded"
    assert "1024" in str(err.value)
    assert backend_a.received() == []


def test_over_capacity_prompt_goes_to_an_allowed_backend_that_holds_it(gateway: Gateway,
                                                                       backend_a: FakeBackend) -> None:
    backend_a.clear()
    raw = chat(client(gateway, "alice"), "word " * 2000, max_tokens=16)
    assert raw.headers["x-kvfence-backend"] == "dedicated-b"  # 8192 tokens: it fits there
    assert backend_a.received() == []


def test_trim_drops_least_relevant_documents(gateway: Gateway, backend_b: FakeBackend) -> None:
    backend_b.clear()
    relevant = "The merger closing date is March 3 and the price is 40 dollars per share. " * 3
    filler = [(f"doc-{i}", f"Cafeteria menu {i}: soup salad bread pasta rice beans. " * 12) for i in range(6)]
    messages: list[Any] = [{"role": "system", "content": "answer from the documents"}]
    messages += [{"role": "user", "name": name, "content": text} for name, text in filler]
    messages.append({"role": "user", "name": "doc-merger", "content": relevant})
    messages.append({"role": "user", "content": "When is the merger closing date and what is the price?"})
    c = client(gateway, "carol")
    raw = c.chat.completions.with_raw_response.create(model="test-model", messages=messages)
    assert int(raw.headers["x-kvfence-tokens-trimmed"]) > 0
    sent = backend_b.received()[-1]["body"]["messages"]
    by_name = {m.get("name"): m["content"] for m in sent}
    assert by_name["doc-merger"] == relevant  # the relevant block is kept
    assert any("removed by the gateway" in by_name[name] for name, _ in filler)
    assert int(raw.headers["x-kvfence-prompt-tokens"]) <= 300


def test_cache_salt_is_injected_and_client_salt_stripped(gateway: Gateway, backend_a: FakeBackend,
                                                         backend_b: FakeBackend) -> None:
    backend_a.clear()
    chat(client(gateway, "alice"), "hi", extra_body={"cache_salt": "guessable"})
    chat(client(gateway, "alice2"), "hi", extra_body={"cache_salt": "guessable"})
    bodies = [r["body"] for r in backend_a.received()]
    salts = [b.get("cache_salt") for b in bodies]
    expected = compute_scope_key(TenantIdentity("acme", "eng", "alice"), CacheScope.WORKSPACE, SECRET.encode())
    assert salts[0] == base64.urlsafe_b64encode(expected).decode().rstrip("=")
    assert salts[1] != salts[0] and "guessable" not in salts  # workspaces are separated, client salt gone
    backend_b.clear()
    chat(client(gateway, "alice", **{"X-Data-Class": "confidential"}), "hi", extra_body={"cache_salt": "x"})
    assert "cache_salt" not in backend_b.received()[-1]["body"]  # b does not take salts: stripped only


def test_rate_limit_returns_429(gateway: Gateway) -> None:
    c = client(gateway, "limited")
    for _ in range(3):
        chat(c, "hi")
    with pytest.raises(openai.RateLimitError) as err:
        chat(c, "hi")
    assert err.value.response.headers.get("retry-after")


def test_unknown_key_is_401(gateway: Gateway) -> None:
    bad = openai.OpenAI(base_url=gateway.url, api_key="kvf-gw-nope", max_retries=0)
    _OPEN_CLIENTS.append(bad)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "x"}])


def test_unknown_model_is_404(gateway: Gateway) -> None:
    # every backend here serves any model name; an empty one is a 400 instead
    with pytest.raises(openai.BadRequestError):
        client(gateway, "alice").chat.completions.create(model="", messages=[{"role": "user", "content": "x"}])


def test_hook_errors_fail_closed_and_blocks_are_400(gateway: Gateway, backend_a: FakeBackend) -> None:
    backend_a.clear()
    with pytest.raises(openai.InternalServerError) as err:
        chat(client(gateway, "alice"), "CRASHME please")
    assert err.value.status_code == 503 and err.value.code == "detector_failure"
    with pytest.raises(openai.BadRequestError, match="blocked"):
        chat(client(gateway, "alice"), "BLOCKME please")
    assert backend_a.received() == []


def test_placeholders_restored_across_chunks(gateway: Gateway, backend_a: FakeBackend) -> None:
    c = client(gateway, "alice")
    backend_a.clear()
    for size in (1, 2, 3, 5):
        backend_a.control(chunk_chars=size)
        stream = c.chat.completions.create(
            model="test-model", stream=True,
            messages=[{"role": "user", "content": "echo: write to alice@example.com today"}])
        text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
        assert text == "echo: write to alice@example.com today"
    backend_a.control(chunk_chars=4)
    whole = chat(c, "echo: mail alice@example.com").parse().choices[0].message.content
    assert whole == "echo: mail alice@example.com"
    assert all("alice@example.com" not in str(r["body"]) for r in backend_a.received())


def test_leak_withheld_stream_and_non_stream(gateway: Gateway) -> None:
    c = client(gateway, "alice")
    with pytest.raises(openai.APIStatusError) as err:
        chat(c, "echo: here is LEAKED-SECRET text")
    assert err.value.status_code == 502 and "incident inc_" in str(err.value)
    stream = c.chat.completions.create(model="test-model", stream=True,
                                       messages=[{"role": "user", "content": "echo: and LEAKED-SECRET again"}])
    with pytest.raises(openai.APIError, match="incident"):
        for _ in stream:
            pass


def test_metrics_flag_over_advertised_backend(gateway: Gateway) -> None:
    text = httpx.get(gateway.root + "/metrics").text
    assert 'kvfence_gateway_backend_context_exceeds_capacity{backend="shared-a"} 1.0' in text
    assert 'kvfence_gateway_backend_kv_capacity_tokens{backend="shared-a"} 1024.0' in text
    assert 'kvfence_gateway_backend_advertised_context_tokens{backend="shared-a"} 4096.0' in text
    assert "kvfence_gateway_requests_total" in text


def test_models_lists_what_backends_serve_with_capped_context(gateway: Gateway) -> None:
    with client(gateway, "alice") as c:
        models = {m.id: m for m in c.models.list()}
    assert "test-model" in models  # discovered from the backends, whose policy entries list no models
    assert models["test-model"].model_extra is not None
    # the largest real maximum among the backends serving it: dedicated-b's 8192, not shared-a's 4096
    assert models["test-model"].model_extra["max_model_len"] == 8192
    bad = httpx.get(gateway.url + "/models", headers={"authorization": "Bearer nope"})
    assert bad.status_code == 401


def test_audit_log_records_decisions_without_text(gateway: Gateway, audit_path: Path) -> None:
    chat(client(gateway, "bob"), "the quick zebrafish jumps")
    httpx.get(gateway.root + "/health")
    rows: list[Any] = []
    for _ in range(50):
        with sqlite3.connect(audit_path) as db:
            rows = db.execute("SELECT tenant, data_class, backend, status, outcome, salt_injected "
                                       "FROM gateway_decisions WHERE tenant='bob'").fetchall()
        if rows:
            break
        time.sleep(0.1)
    assert ("bob", "internal", "shared-a", 200, "ok", 1) in rows
    assert b"zebrafish" not in audit_path.read_bytes()


def test_oversized_body_is_413_and_unknown_routes_are_json(gateway: Gateway) -> None:
    auth = {"authorization": f"Bearer {KEYS['alice']}"}
    big = {"model": "test-model", "messages": [{"role": "user", "content": "x" * 300_000}]}
    response = httpx.post(gateway.url + "/chat/completions", json=big, headers=auth)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    missing = httpx.get(gateway.url + "/images/generations", headers=auth)
    assert missing.status_code == 404 and "no route" in missing.json()["error"]["message"]


def test_client_disconnect_mid_stream_releases_the_request(gateway: Gateway, backend_a: FakeBackend) -> None:
    backend_a.control(chunk_chars=1, delay_s=0.0)
    auth = {"authorization": f"Bearer {KEYS['alice2']}"}
    body = {"model": "test-model", "stream": True, "messages": [{"role": "user", "content": "echo: " + "z" * 400}]}
    with httpx.stream("POST", gateway.url + "/chat/completions", json=body, headers=auth) as response:
        assert response.status_code == 200
        next(response.iter_raw())  # read a little, then hang up
    backend_a.control(chunk_chars=4)
    for _ in range(50):
        metrics = httpx.get(gateway.root + "/metrics").text
        if "kvfence_gateway_in_flight 0.0" in metrics:
            break
        time.sleep(0.1)
    assert "kvfence_gateway_in_flight 0.0" in metrics


def test_upstream_dropping_mid_stream_ends_with_an_error_event(gateway: Gateway, backend_a: FakeBackend) -> None:
    backend_a.control(break_after=2)
    try:
        with client(gateway, "alice") as c:
            stream = c.chat.completions.create(model="test-model", stream=True,
                                               messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.APIError, match="broke off the stream"):
                for _ in stream:
                    pass
    finally:
        backend_a.control(break_after=None)


def test_a_500_falls_back_without_taking_the_backend_out(gateway: Gateway, backend_a: FakeBackend) -> None:
    backend_a.control(status=500)
    try:
        raw = chat(client(gateway, "alice"), "hello")
        assert raw.headers["x-kvfence-backend"] == "dedicated-b"  # next allowed backend for this request
    finally:
        backend_a.control(status=200)
    # one request's 500 says nothing about the backend: the next request goes straight back to it
    assert chat(client(gateway, "alice"), "hello").headers["x-kvfence-backend"] == "shared-a"


def test_filter_failures_stop_the_answer_with_an_error(gateway: Gateway, audit_path: Path) -> None:
    with client(gateway, "alice") as c:
        for marker, code in (("CHECKFAIL", "detector_failure"), ("FILTERBUG", "gateway_error")):
            stream = c.chat.completions.create(model="test-model", stream=True,
                                               messages=[{"role": "user", "content": f"echo: a {marker} b"}])
            with pytest.raises(openai.APIError) as err:
                for _ in stream:
                    pass
            assert getattr(err.value, "code", None) == code or code in str(err.value.body)
        with pytest.raises(openai.InternalServerError) as whole:
            chat(c, "echo: CHECKFAIL")
        assert whole.value.status_code == 503


def test_backend_that_ignores_stream_is_answered_whole_and_filtered(gateway: Gateway,
                                                                    backend_a: FakeBackend) -> None:
    backend_a.control(ignore_stream=True)
    try:
        response = httpx.post(gateway.url + "/chat/completions", headers={"authorization": f"Bearer {KEYS['alice']}"},
                              json={"model": "test-model", "stream": True,
                                    "messages": [{"role": "user", "content": "echo: to alice@example.com"}]})
    finally:
        backend_a.control(ignore_stream=False)
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["choices"][0]["message"]["content"] == "echo: to alice@example.com"


def test_api_key_header_is_accepted_too(gateway: Gateway) -> None:
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}
    ok = httpx.post(gateway.url + "/chat/completions", json=body, headers={"x-api-key": KEYS["alice"]})
    assert ok.status_code == 200
    bad = httpx.post(gateway.url + "/chat/completions", json=body, headers={"api-key": "nope"})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_api_key"


def test_health_names_the_upstream_client_in_use(gateway: Gateway, http_client: str) -> None:
    backends = httpx.get(gateway.root + "/health").json()["backends"]
    forced = os.environ.get("KVFENCE_GATEWAY_HTTP_CLIENT") == "httpx"  # the suite run on httpx throughout
    expected = "fast" if http_client == "auto" and not forced else "httpx"
    assert {name: b["http_client"] for name, b in backends.items()} == dict.fromkeys(backends, expected)
