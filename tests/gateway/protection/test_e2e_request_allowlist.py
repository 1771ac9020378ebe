"""Every byte that reaches a backend is scanned, refused or passed as named structure (issue 16, 3).

Through a real ``kvfence gateway`` process in front of two recording backends (``shared``, where
class ``public`` goes, and ``dedicated`` for the classes above it), raw ``httpx`` bodies as an outside
attacker sends them: personal data or a key hidden in a field the old gateway forwarded unscanned
(``stop``, tool names, ``tool_call_id``, schema ``name`` / ``pattern`` / ``$id`` / keys, image URLs,
``chat_template_kwargs``, ``logit_bias`` keys ...) raises the class or is refused, unknown and
engine-internal fields never leave, and non-text parts are refused above ``public``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import FakeBackend, Gateway

SECRET = "test-gateway-secret-allowlist-0123456789"
KEYS = {"pub": "kvf-gw-allow-pub-key", "int": "kvf-gw-allow-int-key"}
SSN = "536-22-8741"
EMAIL = "jane.doe@example.com"
KEY = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7zB9dF1hJ"
SENSITIVE = [SSN, "jane.doe", "example.com", KEY, "Ab3dE5gH7jK9"]


def policy(shared: FakeBackend, dedicated: FakeBackend, audit: Path) -> dict[str, Any]:
    return {
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0,
                    "protection": {"raise_class": {"US_SSN": "restricted", "EMAIL_ADDRESS": "internal"}}},
        "data_classes": [
            {"name": "public", "allowed_tiers": ["shared"], "protection": {"secrets": "block"}},
            {"name": "internal", "allowed_tiers": ["dedicated"], "protection": {"secrets": "block"}},
            {"name": "restricted", "allowed_tiers": ["dedicated"], "protection": {"secrets": "block"}},
        ],
        "backends": [
            {"name": "shared", "url": shared.url, "tier": "shared", "capacity": "policy"},
            {"name": "dedicated", "url": dedicated.url, "tier": "dedicated", "capacity": "policy"},
        ],
        "tenants": [
            {"name": "pub", "key_sha256": hash_api_key(KEYS["pub"]), "organization": "acme", "default_class": "public"},
            {"name": "int", "key_sha256": hash_api_key(KEYS["int"]), "organization": "acme",
             "default_class": "internal"},
        ],
    }


@pytest.fixture(scope="module")
def shared() -> Iterator[FakeBackend]:
    b = FakeBackend("allow-shared")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def dedicated() -> Iterator[FakeBackend]:
    b = FakeBackend("allow-dedicated")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def gateway(shared: FakeBackend, dedicated: FakeBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw-allow")
    gw = Gateway(policy(shared, dedicated, tmp / "audit.db"), tmp, env={"KVFENCE_GATEWAY_SECRET": SECRET})
    yield gw
    gw.stop()


@pytest.fixture(autouse=True)
def _clear(shared: FakeBackend, dedicated: FakeBackend) -> None:
    shared.clear()
    dedicated.clear()


def post(gw: Gateway, body: dict[str, Any], tenant: str = "pub", endpoint: str = "chat/completions") -> httpx.Response:
    base: dict[str, Any] = {"model": "test-model"}
    if endpoint == "chat/completions":
        base["messages"] = [{"role": "user", "content": "hello"}]
    else:
        base["prompt"] = "hello"
    return httpx.post(f"{gw.url}/{endpoint}", json={**base, **body},
                      headers={"authorization": f"Bearer {KEYS[tenant]}"}, timeout=30)


def forwarded(*backends: FakeBackend) -> list[str]:
    return [str(r["body"]) for b in backends for r in b.received()]


def tool(name: str = "lookup", parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters or {"type": "object"}}}


def assistant_call(call_id: str = "call_1", name: str = "lookup") -> list[dict[str, Any]]:
    return [{"role": "user", "content": "hello"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "done"}]


# An SSN (class restricted, never to the shared backend) in every field the old gateway did not read.
SSN_BODIES = {
    "stop": {"stop": [f"{SSN}"]},
    "stop_string": {"stop": f"ssn {SSN}"},
    "bad_words": {"bad_words": [SSN]},
    "tool_name": {"tools": [tool(f"ssn_{SSN}")]},
    "tool_description": {"tools": [{"type": "function", "function": {"name": "f", "description": f"for {SSN}"}}]},
    "schema_property_key": {"tools": [tool(parameters={"type": "object", "properties": {f"ssn {SSN}": {"type": "string"}}})]},
    "schema_pattern": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "pattern": SSN}}}},
    "schema_name": {"response_format": {"type": "json_schema", "json_schema": {"name": f"ssn {SSN}", "schema": {}}}},
    "schema_id": {"guided_json": {"$id": f"urn:{SSN}", "type": "object"}},
    "schema_format": {"guided_json": {"type": "string", "format": f"ssn {SSN}"}},
    "tool_choice_name": {"tools": [tool()], "tool_choice": {"type": "function", "function": {"name": f"f {SSN}"}}},
    "tool_call_id": {"messages": assistant_call(call_id=f"call {SSN}")},
    "tool_call_name": {"messages": assistant_call(name=f"f {SSN}")},
    "guided_regex": {"guided_regex": f"({SSN}|x)"},
    "guided_grammar": {"guided_grammar": f'root ::= "{SSN}"'},
    "guided_choice": {"guided_choice": [SSN, "no"]},
    "chat_template_kwargs": {"chat_template_kwargs": {"note": f"ssn {SSN}"}},
    "chat_template_kwargs_key": {"chat_template_kwargs": {f"ssn {SSN}": True}},
    "metadata": {"metadata": {"ref": f"ssn {SSN}"}},
    "image_url_query": {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"https://img.example.org/a.png?ssn={SSN}"}}]}]},
    "message_name": {"messages": [{"role": "user", "name": f"ssn {SSN}", "content": "hi"}]},
}


@pytest.mark.parametrize("field", sorted(SSN_BODIES))
def test_an_ssn_in_any_field_keeps_the_request_off_the_shared_backend(gateway: Gateway, shared: FakeBackend,
                                                                      dedicated: FakeBackend, field: str) -> None:
    answer = post(gateway, SSN_BODIES[field])
    assert answer.status_code in (200, 400), answer.text
    assert shared.received() == [], f"{field}: forwarded to the shared backend in class public"
    assert SSN not in "".join(forwarded(dedicated)), f"{field}: the SSN left the gateway"
    assert "Traceback" not in answer.text


@pytest.mark.parametrize("field", ["stop", "tool_name", "schema_property_key", "tool_call_id", "metadata",
                                   "chat_template_kwargs_key", "image_url_query", "guided_regex"])
def test_a_key_in_any_field_is_blocked_by_secrets_block(gateway: Gateway, shared: FakeBackend,
                                                        dedicated: FakeBackend, field: str) -> None:
    body = eval(repr(SSN_BODIES[field]).replace(repr(SSN)[1:-1], KEY))  # the same body, a key for the SSN
    answer = post(gateway, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "request_blocked"
    assert forwarded(shared, dedicated) == []


def test_an_email_in_an_image_url_raises_the_class_and_is_not_forwarded_in_the_url(
        gateway: Gateway, shared: FakeBackend, dedicated: FakeBackend) -> None:
    content = [{"type": "text", "text": "what is this"},
               {"type": "image_url", "image_url": {"url": f"https://img.example.org/x.png?u={EMAIL}"}}]
    answer = post(gateway, {"messages": [{"role": "user", "content": content}]})
    # A URL cannot carry a placeholder (the fetch would break), and the address raised the class to one
    # that takes no images: refused, never sent with the address.
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "request_blocked"
    assert "messages[0].content[1]" in answer.json()["error"]["message"]
    assert forwarded(shared, dedicated) == []


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="}},
    {"type": "image_url", "image_url": {"url": "https://img.example.org/cat.png"}},
    {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}},
    {"type": "file", "file": {"file_data": "JVBERi0xLjQK", "filename": "report.pdf"}},
    {"type": "video_url", "video_url": {"url": "https://v.example.org/a.mp4"}},
])
def test_non_text_parts_are_refused_above_public_and_pass_in_public(gateway: Gateway, shared: FakeBackend,
                                                                    dedicated: FakeBackend, part: dict[str, Any]) -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "describe"}, part]}]}
    refused = post(gateway, body, tenant="int")
    assert refused.status_code == 400 and "non_text" in refused.json()["error"]["message"], refused.text
    assert forwarded(shared, dedicated) == []
    assert post(gateway, body, tenant="pub").status_code == 200
    assert len(shared.received()) == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"kv_transfer_params": {"do_remote_prefill": True, "remote_block_ids": [1, 2]}}, "kv_transfer_params"),
    ({"vllm_xargs": {"a": 1}}, "vllm_xargs"),
    ({"priority": -100}, "priority"),
    ({"bootstrap_room": 7}, "bootstrap_room"),
    ({"rid": "steal-me"}, "rid"),
    ({"chat_template": "{{ messages }}"}, "chat_template"),
    ({"extra_body": {"kv_transfer_params": {}}}, "extra_body"),
    ({"surprise": "field"}, "surprise"),
    ({"messages": [{"role": "user", "content": "hi", "x_hidden": "536-22-8741"}]}, "messages[0].x_hidden"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "extra": 1}]}]},
     "messages[0].content[0].extra"),
    ({"messages": [{"role": "user", "content": [{"type": "secret_part", "data": "x"}]}]}, "messages[0].content[0]"),
    ({"tools": [{"type": "function", "function": {"name": "f", "hidden": SSN}}]}, "tools[0].function.hidden"),
    ({"logit_bias": {"jane.doe@example.com": 5}}, "logit_bias"),
    ({"stream_options": {"include_usage": True, "leak": 1}}, "stream_options.leak"),
])
def test_unknown_and_engine_internal_fields_are_refused_never_forwarded(gateway: Gateway, shared: FakeBackend,
                                                                        dedicated: FakeBackend, body: dict[str, Any],
                                                                        field: str) -> None:
    answer = post(gateway, body)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]["message"]
    assert forwarded(shared, dedicated) == []


def test_completions_fields_are_covered_too(gateway: Gateway, shared: FakeBackend, dedicated: FakeBackend) -> None:
    assert post(gateway, {"stop": [SSN]}, endpoint="completions").status_code in (200, 400)
    assert shared.received() == [] and SSN not in "".join(forwarded(dedicated))
    dedicated.clear()
    answer = post(gateway, {"kv_transfer_params": {}}, endpoint="completions")
    assert answer.status_code == 400 and forwarded(shared, dedicated) == []


def test_ordinary_requests_still_pass_with_every_known_field(gateway: Gateway, shared: FakeBackend) -> None:
    body = {"temperature": 0.2, "top_p": 0.9, "max_tokens": 8, "n": 1, "seed": 3, "stop": ["\n\n"],
            "logit_bias": {"50256": -100}, "presence_penalty": 0.1, "user": "u-17", "top_k": 40, "min_p": 0.05,
            "tools": [tool(parameters={"type": "object", "properties": {"city": {"type": "string"}},
                                       "required": ["city"]})],
            "tool_choice": {"type": "function", "function": {"name": "lookup"}},
            "response_format": {"type": "json_object"}, "stream": False, "cache_salt": "mine"}
    answer = post(gateway, body)
    assert answer.status_code == 200, answer.text
    sent = shared.received()[-1]["body"]
    assert sent["stop"] == ["\n\n"] and sent["tools"][0]["function"]["name"] == "lookup"
    assert "mine" not in str(sent)
