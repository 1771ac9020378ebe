"""The request path's per-process memos (authenticated keys, salt-field verdicts, upstream header
lines): same answers as without them, bounded, and never holding what a caller could flood them with."""

from __future__ import annotations

import httpx
import pytest

from kvfence.gateway.errors import AuthenticationFailed
from kvfence.gateway.policy import tenants
from kvfence.gateway.policy.schema import TenantConfig
from kvfence.gateway.policy.tenants import TenantRegistry, hash_api_key
from kvfence.gateway.routing import cache_salt
from kvfence.gateway.routing.cache_salt import apply_cache_salt
from kvfence.gateway.transport import fast_pool
from kvfence.gateway.transport.fast_pool import FastUpstream


def _registry() -> TenantRegistry:
    return TenantRegistry([TenantConfig(name=f"t{i}", key_sha256=hash_api_key(f"kvf-gw-key-{i}"),
                                        organization=f"org{i}", default_class="internal") for i in range(3)])


def test_a_key_authenticates_the_same_tenant_every_time_and_is_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = _registry()
    hashed: list[str] = []
    real = tenants.hash_api_key
    monkeypatch.setattr(tenants, "hash_api_key", lambda key: hashed.append(key) or real(key))
    first = registry.authenticate("Bearer kvf-gw-key-1")
    assert registry.authenticate("Bearer kvf-gw-key-1") is first
    assert registry.authenticate(None, "kvf-gw-key-1") is first  # x-api-key: the same key, the same memo
    assert first.name == "t1" and hashed == ["kvf-gw-key-1"]
    assert registry.authenticate("Bearer kvf-gw-key-2").name == "t2"


def test_unknown_keys_are_refused_every_time_and_never_remembered() -> None:
    registry = _registry()
    for i in range(50):
        with pytest.raises(AuthenticationFailed):
            registry.authenticate(f"Bearer kvf-gw-guess-{i}")
    with pytest.raises(AuthenticationFailed):
        registry.authenticate("Bearer kvf-gw-guess-0")
    assert registry._by_token == {}
    with pytest.raises(AuthenticationFailed):  # a prefix or a longer key is another key
        registry.authenticate("Bearer kvf-gw-key-1x")


def test_the_key_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tenants, "MAX_CACHED_KEYS", 2)
    registry = _registry()
    for i in (0, 1, 2, 0, 1):
        assert registry.authenticate(f"Bearer kvf-gw-key-{i}").name == f"t{i}"
        assert len(registry._by_token) <= 2


def test_salt_fields_are_stripped_in_every_spelling_with_the_memo_warm_or_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_salt, "_MAX_KNOWN_FIELDS", 4)
    for _ in range(3):  # cold, warm, and with the memo emptied on the way
        body = {"model": "m", "messages": [], "Cache-Salt": "x", "cacheSalt": "y", "prompt_cache_key": "z",
                "stream": True, **{f"extra{i}": i for i in range(6)}}
        assert apply_cache_salt(body, "s") is True
        assert "Cache-Salt" not in body and "cacheSalt" not in body and "prompt_cache_key" not in body
        assert body["cache_salt"] == "s" and body["extra5"] == 5
        assert len(cache_salt._KNOWN_FIELDS) <= 4
    clean = {"model": "m", "messages": []}
    assert apply_cache_salt(clean, None) is False and clean == {"model": "m", "messages": []}


def test_upstream_header_lines_are_remembered_but_not_the_request_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_pool, "_MAX_MEMO_LINES", 3)
    pool = FastUpstream("http://127.0.0.1:9/v1")
    headers = {"authorization": "Bearer up", "content-type": "application/json", "Content-Length": "9"}
    for i in range(4):
        raw = pool._request_bytes("/chat/completions", b"{}", {**headers, "x-request-id": f"gwreq-{i}"})
        head = raw.split(b"\r\n\r\n")[0].split(b"\r\n")
        assert head[0] == b"POST /v1/chat/completions HTTP/1.1"
        assert b"authorization: Bearer up" in head and b"x-request-id: gwreq-%d" % i in head
        assert b"content-length: 2" in head and b"Content-Length: 9" not in head  # framing is the client's
        assert raw.endswith(b"\r\n\r\n{}")
        assert all(name != "x-request-id" for name, _ in pool._lines) and len(pool._lines) <= 3


@pytest.mark.parametrize("name, value", [("x-evil", "a\r\nx-injected: 1"), ("x-evil\r\nx", "v"), ("x-ok", "caf\u20ac")])
def test_a_bad_header_is_refused_every_time_not_remembered(name: str, value: str) -> None:
    pool = FastUpstream("http://127.0.0.1:9/v1")
    for _ in range(2):
        with pytest.raises(httpx.LocalProtocolError):
            pool._request_bytes("/completions", b"{}", {name: value})
    assert pool._lines == {}
