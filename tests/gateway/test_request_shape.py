"""Malformed completion bodies get the gateway's own 400, naming the field, and never reach a backend.

Forwarded, they crashed a backend (the caller saw a 503 ``backend_unavailable``) or were answered
as something else (``"stream": "yes"`` streamed). OpenAI refuses each of these bodies with a 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kvfence.gateway.admission.request_shape import check_request_shape
from kvfence.gateway.errors import GatewayRequestError
from kvfence.gateway.policy.plans import parse_forwardable
from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import FakeBackend, Gateway

KEY = "kvf-gw-shape-key"
USER = {"role": "user", "content": "hi"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeBackend, Gateway]]:
    backend = FakeBackend("shape")
    tmp = tmp_path_factory.mktemp("gw-shape")
    gateway = Gateway({
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "shape", "url": backend.url, "tier": "shared", "capacity": "policy"}],
        "tenants": [{"name": "t", "key_sha256": hash_api_key(KEY), "organization": "acme", "default_class": "public"}],
    }, tmp)
    yield backend, gateway
    gateway.stop()
    backend.stop()


BAD_BODIES: list[tuple[str, str, str]] = [
    ("chat", '{"model": "m", "stream": "yes", "messages": [{"role": "user", "content": "hi"}]}', "stream"),
    ("chat", '{"model": "m", "messages": []}', "messages"),
    ("chat", '{"model": "m", "messages": "hi"}', "messages"),
    ("chat", '{"model": "m"}', "messages"),
    ("chat", '{"model": "m", "messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
    ("chat", '{"model": "m", "messages": [{"content": "hi"}]}', "messages[0].role"),
    ("chat", '{"model": "m", "messages": ["hi"]}', "messages[0]"),
    ("chat", '{"model": "m", "messages": [{"role": "user", "content": null}]}', "messages[0].content"),
    ("chat", '{"model": "m", "messages": [{"role": "user", "content": ["hi"]}]}', "messages[0].content[0]"),
    ("completions", '{"model": "m", "prompt": 5}', "prompt"),
    ("completions", '{"model": "m", "prompt": []}', "prompt"),
    ("completions", '{"model": "m", "prompt": [[1, 2], []]}', "prompt"),
    ("completions", '{"model": "m", "prompt": [1, "a"]}', "prompt"),
    ("completions", '{"model": "m", "prompt": [true, false]}', "prompt"),
]


@pytest.mark.parametrize(("endpoint", "raw", "param"), BAD_BODIES)
def test_malformed_body_is_a_400_naming_the_field(setup: tuple[FakeBackend, Gateway], endpoint: str, raw: str,
                                                  param: str) -> None:
    backend, gateway = setup
    backend.clear()
    path = "/chat/completions" if endpoint == "chat" else "/completions"
    response = httpx.post(gateway.url + path, content=raw.encode(), timeout=30,
                          headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert backend.received() == []


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_numbers_are_refused(setup: tuple[FakeBackend, Gateway], constant: str) -> None:
    backend, gateway = setup
    backend.clear()
    raw = '{"model": "m", "temperature": ' + constant + ', "messages": [{"role": "user", "content": "hi"}]}'
    response = httpx.post(gateway.url + "/chat/completions", content=raw.encode(), timeout=30,
                          headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"})
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
    assert backend.received() == []


def test_well_formed_bodies_still_pass(setup: tuple[FakeBackend, Gateway]) -> None:
    backend, gateway = setup
    headers = {"authorization": f"Bearer {KEY}"}
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("/chat/completions", {"model": "m", "stream": False, "messages": [
            {"role": "system", "content": [{"type": "text", "text": "be brief"}]}, USER,
            {"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": "again"}]}),
        ("/completions", {"model": "m", "prompt": ["a", "b"]}),
        ("/completions", {"model": "m", "prompt": [1, 2, 3]}),
        ("/completions", {"model": "m", "prompt": [[1, 2], [3]]}),
    ]
    for path, body in bodies:
        backend.clear()
        response = httpx.post(gateway.url + path, json=body, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        assert len(backend.received()) == 1


def test_duplicate_key_fallback_refuses_nan_too() -> None:
    with pytest.raises(ValueError, match="NaN"):
        parse_forwardable(b'{"a": 1, "a": NaN}')
    assert parse_forwardable(json.dumps({"a": 1.5}).encode()) == ({"a": 1.5}, True)


def test_shape_check_leaves_unknown_fields_to_the_backend() -> None:
    check_request_shape({"messages": [USER], "whatever": {"x": [1]}, "stream": None}, "chat")
    with pytest.raises(GatewayRequestError):
        check_request_shape({"messages": [USER], "stream": 1}, "chat")
