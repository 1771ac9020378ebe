"""The per-request shortcuts of ``plans.py``: forwarding the client's bytes, splicing the salt, caching."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.gateway.policy.plans import MAX_CACHED_ROUTES, PlanCache, parse_forwardable, with_cache_salt
from kvfence.gateway.routing.classes import RouteDecision


def _ok(raw: bytes) -> bool:
    body, forwardable = parse_forwardable(raw)
    assert body == json.loads(raw)
    return forwardable


def test_plain_bodies_are_forwardable() -> None:
    assert _ok(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}')
    assert _ok(b'{}')
    assert _ok(b'{"model": "m", "user": "model", "prompt": "say \\"model\\""}')


def test_duplicate_keys_are_never_forwarded_raw() -> None:
    # Python keeps the last max_tokens, a first-wins backend the first: the cap would check the wrong one
    assert not _ok(b'{"model": "m", "max_tokens": 10, "max_tokens": 100000}')
    # ... also when one spelling is escaped, and inside a message
    assert not _ok(b'{"model": "m", "max_tok\\u0065ns": 100000, "max_tokens": 10}')
    assert not _ok(b'{"messages": [{"role": "user", "content": "long", "content": "short"}]}')


def test_only_plain_utf8_is_forwarded() -> None:
    body = {"model": "m", "prompt": "é"}
    assert parse_forwardable(json.dumps(body, ensure_ascii=False).encode()) == (body, True)
    assert parse_forwardable(json.dumps(body).encode("utf-16")) == (body, False)
    assert parse_forwardable(b"\xef\xbb\xbf" + json.dumps(body).encode()) == (body, False)


def test_invalid_json_raises_value_error() -> None:
    for bad in (b'{"model": ', b"\xff\xfe\x00", b"\xc3\x28"):
        with pytest.raises(ValueError):
            parse_forwardable(bad)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8), max_size=6), st.booleans())
def test_serialised_bodies_parse_back_forwardable_and_take_a_salt(body: dict[str, object], ascii_only: bool) -> None:
    raw = json.dumps(body, ensure_ascii=ascii_only).encode()
    assert parse_forwardable(raw) == (body, True)
    salted = with_cache_salt(raw, "c2FsdA_-x", has_keys=bool(body))
    assert json.loads(salted) == {**body, "cache_salt": "c2FsdA_-x"}


def test_salt_splice_keeps_whitespace_harmless() -> None:
    assert json.loads(with_cache_salt(b'{"model": "m"}\r\n ', "s", has_keys=True)) == {"model": "m", "cache_salt": "s"}
    assert json.loads(with_cache_salt(b'  {}  ', "s", has_keys=False)) == {"cache_salt": "s"}
    with pytest.raises(ValueError):
        with_cache_salt(b'[1]', "s", has_keys=True)


def test_route_cache_keeps_decisions_not_refusals_and_stays_bounded() -> None:
    cache = PlanCache()
    made: list[str] = []

    def decide(model: str) -> RouteDecision:
        made.append(model)
        return RouteDecision("public", (), {})

    first = cache.route(("t", "public", "m"), lambda: decide("m"))
    assert cache.route(("t", "public", "m"), lambda: decide("m")) is first and made == ["m"]

    def refuse() -> RouteDecision:
        raise LookupError("no backend")

    for _ in range(2):
        with pytest.raises(LookupError):
            cache.route(("t", "public", "x"), refuse)
    for i in range(MAX_CACHED_ROUTES + 5):
        cache.route(("t", "public", f"model-{i}"), lambda: RouteDecision("public", (), {}))
    assert len(cache._routes) <= MAX_CACHED_ROUTES
    cache.clear()
    cache.route(("t", "public", "m"), lambda: decide("m"))
    assert made == ["m", "m"]
