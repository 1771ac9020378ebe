"""Attack: request bodies and heads that crashed the request path (issue 16, item 7), against a real
``kvfence serve`` and a real ``kvfence gateway`` in front of a recording backend.

Deep nesting (arrays, objects, in a message, past any parser's recursion), lone UTF-16 surrogate
escapes (in content, a content part, a tool's name, a stop string), integers longer than Python
converts (``max_tokens``, ``n``, ``seed``, negative), and credentials sent twice (the same header
twice, equal or not; ``Authorization`` and ``x-api-key`` that disagree). Each is a 400 in OpenAI's
shape, nothing reaches the backend, and neither server logs a traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from kvfence.server.auth.keys import add_key
from tests.gateway.conftest import KVFENCE, FakeBackend, Gateway, Process
from tests.http_server.harness import RawClient
from tests.netutil import free_port

KEY = "sk-bad-requests-test-key-0123"
OTHER_KEY = "sk-bad-requests-other-key-456"
_MSG = '{"role":"user","content":"hi"}'


def _nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


BODIES = {
    "array nested 100000 deep": '{"model":"m","messages":[' + _MSG + '],"x":' + _nested(100_000) + "}",
    "array nested 900 deep": '{"model":"m","messages":[' + _MSG + '],"x":' + _nested(900) + "}",
    "objects nested 2000 deep": '{"model":"m","messages":[' + _MSG + '],"x":' + '{"a":' * 2000 + "1" + "}" * 2000 + "}",
    "content nested 300 deep": '{"model":"m","messages":[{"role":"user","content":' + _nested(300) + "}]}",
    "lone high surrogate in content": '{"model":"m","messages":[{"role":"user","content":"a\\ud800b"}]}',
    "lone low surrogate in content": '{"model":"m","messages":[{"role":"user","content":"\\udfff"}]}',
    "lone surrogate in a content part": '{"model":"m","messages":[{"role":"user","content":'
                                        '[{"type":"text","text":"x\\udbff"}]}]}',
    "lone surrogate in a tool name": '{"model":"m","messages":[' + _MSG + '],"tools":[{"type":"function",'
                                     '"function":{"name":"f\\ud834","parameters":{}}}]}',
    "lone surrogate in stop": '{"model":"m","messages":[' + _MSG + '],"stop":["\\ud800"]}',
    "max_tokens of 4301 digits": '{"model":"m","messages":[' + _MSG + '],"max_tokens":' + "9" * 4301 + "}",
    "max_tokens of 100000 digits": '{"model":"m","messages":[' + _MSG + '],"max_tokens":' + "1" * 100_000 + "}",
    "negative n of 5000 digits": '{"model":"m","messages":[' + _MSG + '],"n":-' + "7" * 5000 + "}",
    "seed of 5000 digits": '{"model":"m","messages":[' + _MSG + '],"seed":' + "3" * 5000 + "}",
}


class Target:
    def __init__(self, name: str, proc: Process, key_header: bytes, backend: FakeBackend | None) -> None:
        self.name = name
        self.proc = proc
        self.port = proc.port
        self.key_header = key_header
        self.backend = backend

    @property
    def log(self) -> str:
        return self.proc.log_path.read_text() if self.proc.log_path else ""


@pytest.fixture(scope="module", params=["serve", "gateway"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp(f"bad-{request.param}")
    if request.param == "serve":
        keys = tmp / "keys.toml"
        key = add_key(keys, organization="acme", workspace="default", name="k")
        proc: Process = _serve_with_keys(tmp, keys)
        yield Target("serve", proc, b"authorization: Bearer " + key.encode() + b"\r\n", None)
        proc.stop()
        return
    backend = FakeBackend("recording")
    gw = Gateway({
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "rec", "url": backend.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 4096, "kv_capacity_tokens": 4096}}],
        "tenants": [{"name": "t", "key_sha256": hash_api_key(KEY), "organization": "acme", "default_class": "public"},
                    {"name": "u", "key_sha256": hash_api_key(OTHER_KEY), "organization": "globex",
                     "default_class": "public"}],
    }, tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield Target("gateway", gw, b"authorization: Bearer " + KEY.encode() + b"\r\n", backend)
    gw.stop()
    backend.stop()


def _serve_with_keys(tmp: Path, keys: Path) -> Process:
    """``kvfence serve --keys`` (the duplicate-credential cases need a keyed server), once it is ready."""
    port = free_port()
    proc = Process([KVFENCE, "serve", "--keys", str(keys), "--port", str(port), "--kv-cache-tokens", "1024",
                    "--max-model-len", "auto", "--log-level", "info"], port, log_path=tmp / "serve.log")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.stop()
    pytest.fail("kvfence serve did not become ready:\n" + (tmp / "serve.log").read_text())


def _refusals(target: Target) -> int:
    return sum(1 for line in target.log.splitlines() if "refused" in line)


def _post_raw(target: Target, body: bytes, headers: bytes) -> tuple[int, dict[str, object]]:
    client = RawClient(target.port, timeout=30)
    try:
        client.send(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                    + headers + b"content-length: %d\r\n\r\n" % len(body) + body)
        status, _, answer = client.read_response()
    finally:
        client.close()
    return status, json.loads(answer)["error"]


@pytest.mark.parametrize("name", list(BODIES))
def test_a_body_no_parser_should_act_on_is_a_400_without_a_traceback(target: Target, name: str) -> None:
    received = len(target.backend.received()) if target.backend is not None else 0
    logged = _refusals(target)
    status, error = _post_raw(target, BODIES[name].encode(), target.key_header)
    assert status == 400, error
    assert _refusals(target) == logged + 1, "expected one log line for the refusal"
    assert error["type"] == "invalid_request_error" and isinstance(error["message"], str)
    assert error["code"] in ("invalid_json", "invalid_encoding", "invalid_request"), error
    assert "Traceback" not in target.log
    if target.backend is not None:
        assert len(target.backend.received()) == received, "the bad request reached the backend"


@pytest.mark.parametrize("headers", [
    b"authorization: Bearer %(key)s\r\nauthorization: Bearer %(key)s\r\n",
    b"authorization: Bearer %(key)s\r\nauthorization: Bearer %(other)s\r\n",
    b"authorization: Bearer %(other)s\r\nauthorization: Bearer %(key)s\r\n",
    b"authorization: Bearer %(key)s\r\nx-api-key: %(other)s\r\n",
    b"x-api-key: %(key)s\r\nx-api-key: %(key)s\r\n",
    b"x-api-key: %(other)s\r\napi-key: %(key)s\r\n",
], ids=["same twice", "good then other", "other then good", "bearer and x-api-key", "x-api-key twice",
        "x-api-key and api-key"])
def test_two_credentials_are_a_400_on_both_servers(target: Target, headers: bytes) -> None:
    key = target.key_header.split(b"Bearer ", 1)[1].strip()
    received = len(target.backend.received()) if target.backend is not None else 0
    logged = _refusals(target)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    status, error = _post_raw(target, body, headers % {b"key": key, b"other": OTHER_KEY.encode()})
    assert status == 400, error
    assert _refusals(target) == logged + 1, "expected one log line for the refusal"
    assert error["code"] == "ambiguous_credentials"
    assert "Traceback" not in target.log
    if target.backend is not None:
        assert len(target.backend.received()) == received


@pytest.mark.parametrize("also_x_api_key", [False, True], ids=["bearer", "bearer and x-api-key, same key"])
def test_one_credential_still_works(target: Target, also_x_api_key: bool) -> None:
    auth = {"authorization": target.key_header.split(b": ", 1)[1].strip().decode()}
    if also_x_api_key:  # one key in two places is not ambiguous
        auth["x-api-key"] = auth["authorization"].removeprefix("Bearer ")
    model = httpx.get(f"http://127.0.0.1:{target.port}/v1/models", headers=auth, timeout=30).json()["data"][0]["id"]
    response = httpx.post(f"http://127.0.0.1:{target.port}/v1/chat/completions", headers=auth, timeout=120,
                          json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert response.status_code == 200, response.text
