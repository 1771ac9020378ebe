"""Tool-call arguments through a real ``kvfence gateway`` process, a real backend process that answers
with tool calls (``leaky_backend.py``, mode ``tools``) and the official ``openai`` client as the caller.

The caller's message holds a value with quotes, backslashes, a newline and a JSON fragment that would
add a key (found by the protection hook plus one test rule, ``codename_hooks.py``), and an e-mail
address written with ``\\x40`` (found by the built-in rules, restored as the caller wrote it, backslash
included). The backend echoes the message into the arguments of two tool calls per choice (``n=2``),
one plain and one with ``<``/``>`` written as ``\\u003c``/``\\u003e``; streamed, in 3-character pieces;
through both HTTP servers of the gateway (uvicorn and lean).
Each call's arguments must parse and give back exactly the caller's message. Failed on ``5f18e3c``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.gateway.conftest import Gateway
from tests.gateway.protection.test_e2e_protection import LeakyBackend

KEY = "kvf-gw-test-tools-key"
VALUE = 'Jo "JJ" O\'Brien \\ C:\\tmp\\\nnext line", "admin": true, "x": "'
MESSAGE = f"Send the contract to ⟦{VALUE}⟧ at alice\\x40example.com, phone (415) 555-0132."
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "send_email", "parameters": {"type": "object", "properties": {
        "to": {"type": "string"}, "body": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def backend() -> Iterator[LeakyBackend]:
    b = LeakyBackend()
    b.mode("tools")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def gw(backend: LeakyBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    from kvfence.gateway.policy.tenants import hash_api_key

    tmp = tmp_path_factory.mktemp("tools-gw")
    policy = {
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0,
                    "load_protection": False, "hooks": ["tests.gateway.protection.codename_hooks:build"],
                    "protection": {"leak": {"enabled": False}}},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "tools", "url": backend.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [{"name": "tools-key", "key_sha256": hash_api_key(KEY), "organization": "acme",
                     "default_class": "internal"}],
    }
    g = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield g
    g.stop()


def arguments(gw: Gateway, *, stream: bool) -> dict[tuple[int, int], str]:
    """Each (choice, tool call)'s arguments as the caller gets them."""
    client = openai.OpenAI(base_url=gw.url, api_key=KEY, max_retries=0, timeout=30)
    try:
        messages: list[Any] = [{"role": "user", "content": MESSAGE}]
        if not stream:
            out = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, n=2)
            return {(choice.index, i): call.function.arguments  # type: ignore[union-attr]
                    for choice in out.choices for i, call in enumerate(choice.message.tool_calls or [])}
        joined: dict[tuple[int, int], str] = {}
        for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS, n=2, stream=True):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    key = (choice.index, call.index)
                    joined[key] = joined.get(key, "") + ((call.function.arguments if call.function else None) or "")
        return joined
    finally:
        client.close()


@pytest.mark.parametrize("stream", [False, True])
def test_restored_values_in_tool_call_arguments_keep_them_json(gw: Gateway, backend: LeakyBackend,
                                                                stream: bool) -> None:
    got = arguments(gw, stream=stream)
    sent = backend.received()[-1]["messages"][-1]["content"]
    assert VALUE not in sent and "alice" not in sent and "555-0132" not in sent
    assert "<PERSON_1>" in sent and "<EMAIL_1>" in sent and "<PHONE_1>" in sent
    assert sorted(got) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for key, text in got.items():
        parsed = json.loads(text)  # the old gateway's arguments did not even parse
        assert parsed == {"to": MESSAGE, "body": f"Hello {MESSAGE}"}, key
        assert "admin" not in parsed
