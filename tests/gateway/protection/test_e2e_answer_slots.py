"""Custom tool calls and JSON answers through a real ``kvfence gateway`` process, a real backend process
(``leaky_backend.py``) and the official ``openai`` client as the caller.

- ``custom``: two custom tool calls per choice (``n=2``) whose free-text ``custom.input`` echoes the
  caller's message (a value with quotes, backslashes, a newline and a JSON fragment, plus an e-mail and
  a phone number): the caller gets its message back exactly, unescaped, streamed and not, through both
  HTTP servers;
- ``json``: the answer to a ``response_format: json_object`` request is a JSON document holding the
  message: it must parse and give the message back;
- ``leak_custom``: the backend answers one tenant with a custom tool call carrying the previous
  tenant's prompt: withheld (502 ``cross_tenant_leak_suspected``; streamed, the stream ends in an
  error) with an incident, like a leak in ``content``.

All failed on ``c637f5b`` (custom inputs and JSON content came back with placeholders or broken JSON,
and the leak in the custom input was delivered).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway
from tests.gateway.protection.test_e2e_protection import LeakyBackend
from tests.gateway.protection.test_e2e_tool_calls import KEY, MESSAGE, VALUE

SECRET = ("Confidential: Halvorsen Maritime will acquire Tideline Logistics for four hundred million euros, "
          "announcement planned after the board meeting on the third of March.")
LEAK_KEYS = {org: f"kvf-gw-test-slots-{org}-key" for org in ("acme", "globex")}
CUSTOM_TOOLS: list[Any] = [{"type": "custom", "custom": {"name": "shell", "description": "run a command"}}]


@pytest.fixture(scope="module")
def backend() -> Iterator[LeakyBackend]:
    b = LeakyBackend()
    yield b
    b.stop()


def policy(backend: LeakyBackend, audit: str, gateway: dict[str, Any], tenants: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "gateway": {"audit_log": audit, "capacity_refresh_s": 0, **gateway},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "slots", "url": backend.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": tenants,
    }


@pytest.fixture(scope="module")
def gw(backend: LeakyBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("slots-gw")
    g = Gateway(policy(backend, f"sqlite:///{tmp / 'audit.db'}",
                       {"load_protection": False, "hooks": ["tests.gateway.protection.codename_hooks:build"],
                        "protection": {"leak": {"enabled": False}}},
                       [{"name": "tools-key", "key_sha256": hash_api_key(KEY), "organization": "acme",
                         "default_class": "internal"}]),
                tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield g
    g.stop()


@pytest.fixture(scope="module")
def leak_gw(backend: LeakyBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("slots-leak-gw")
    g = Gateway(policy(backend, f"sqlite:///{tmp / 'audit.db'}", {"protection": {"leak": {"window_s": 600}}},
                       [{"name": f"{org}-key", "key_sha256": hash_api_key(key), "organization": org,
                         "default_class": "internal"} for org, key in LEAK_KEYS.items()]),
                tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield g
    g.stop()


def custom_inputs(gw: Gateway, key: str, text: str, *, stream: bool, n: int = 2,
                  into: dict[tuple[int, int], str] | None = None) -> dict[tuple[int, int], str]:
    """Each (choice, tool call)'s ``custom.input`` as the caller gets it (streamed: also into ``into``)."""
    client = openai.OpenAI(base_url=gw.url, api_key=key, max_retries=0, timeout=30)
    try:
        messages: list[Any] = [{"role": "user", "content": text}]
        if not stream:
            out = client.chat.completions.create(model="m", messages=messages, tools=CUSTOM_TOOLS, n=n)
            got = {}
            for choice in out.choices:
                for i, call in enumerate(choice.message.tool_calls or []):
                    assert call.type == "custom"
                    got[(choice.index, i)] = call.custom.input
            return got
        joined: dict[tuple[int, int], str] = {} if into is None else into
        for chunk in client.chat.completions.create(model="m", messages=messages, tools=CUSTOM_TOOLS, n=n,
                                                    stream=True):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    custom = getattr(call, "custom", None) or {}  # not in the client's delta type: an extra field
                    key_ = (choice.index, call.index)
                    joined[key_] = joined.get(key_, "") + (custom.get("input") or "")
        return joined
    finally:
        client.close()


@pytest.mark.parametrize("stream", [False, True])
def test_custom_tool_inputs_are_restored_exactly(gw: Gateway, backend: LeakyBackend, stream: bool) -> None:
    backend.mode("custom")
    got = custom_inputs(gw, KEY, MESSAGE, stream=stream)
    sent = backend.received()[-1]["messages"][-1]["content"]
    assert VALUE not in sent and "<PERSON_1>" in sent and "<EMAIL_1>" in sent
    assert got == {(n, i): text for n in range(2) for i, text in enumerate([MESSAGE, f"Hello {MESSAGE}"])}


@pytest.mark.parametrize("stream", [False, True])
def test_json_object_answers_still_parse(gw: Gateway, backend: LeakyBackend, stream: bool) -> None:
    backend.mode("json")
    client = openai.OpenAI(base_url=gw.url, api_key=KEY, max_retries=0, timeout=30)
    try:
        messages: list[Any] = [{"role": "user", "content": MESSAGE}]
        if stream:
            content = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
                model="m", messages=messages, response_format={"type": "json_object"}, stream=True)
                if chunk.choices)
        else:
            content = client.chat.completions.create(model="m", messages=messages,
                                                     response_format={"type": "json_object"}
                                                     ).choices[0].message.content or ""
    finally:
        client.close()
    assert "<PERSON_1>" in backend.received()[-1]["messages"][-1]["content"]
    parsed = json.loads(content)
    assert parsed == {"to": MESSAGE, "body": f"Hello {MESSAGE}"} and "admin" not in parsed


def _acme_sends_its_secret_then_the_backend_leaks(leak_gw: Gateway, backend: LeakyBackend) -> None:
    """acme's prompt goes through (fingerprinted); the backend then answers globex with a custom tool
    call over it."""
    backend.mode("benign")
    openai_acme = openai.OpenAI(base_url=leak_gw.url, api_key=LEAK_KEYS["acme"], max_retries=0, timeout=30)
    try:
        openai_acme.chat.completions.create(model="m", messages=[{"role": "user", "content": SECRET}])
    finally:
        openai_acme.close()
    backend.mode("leak_custom")


def test_another_tenants_prompt_in_a_custom_tool_call_is_withheld(leak_gw: Gateway, backend: LeakyBackend) -> None:
    _acme_sends_its_secret_then_the_backend_leaks(leak_gw, backend)
    with pytest.raises(openai.APIStatusError) as caught:
        custom_inputs(leak_gw, LEAK_KEYS["globex"], "List the files, please.", stream=False, n=1)
    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and body.get("code") == "cross_tenant_leak_suspected"
    _acme_sends_its_secret_then_the_backend_leaks(leak_gw, backend)
    received: dict[tuple[int, int], str] = {}
    with pytest.raises(openai.APIError):
        custom_inputs(leak_gw, LEAK_KEYS["globex"], "And the folders?", stream=True, n=1, into=received)
    assert "third of March" not in "".join(received.values())  # stopped at the first 7-word run
