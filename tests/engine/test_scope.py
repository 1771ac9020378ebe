"""Invariant I5: scope keys come from the authenticated identity and a server secret."""

from __future__ import annotations

import pytest

from kvfence.errors import ConfigError
from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key

SECRET = b"s" * 32
A = TenantIdentity("org-a", "ws1", "k1")
A2 = TenantIdentity("org-a", "ws2", "k2")
B = TenantIdentity("org-b", "ws1", "k1")


def test_org_scope_shares_within_org_only() -> None:
    assert compute_scope_key(A, CacheScope.ORG, SECRET) == compute_scope_key(A2, CacheScope.ORG, SECRET)
    assert compute_scope_key(A, CacheScope.ORG, SECRET) != compute_scope_key(B, CacheScope.ORG, SECRET)


def test_key_scope_separates_keys_and_global_joins_orgs() -> None:
    assert compute_scope_key(A, CacheScope.KEY, SECRET) != compute_scope_key(A2, CacheScope.KEY, SECRET)
    assert compute_scope_key(A, CacheScope.GLOBAL, SECRET) == compute_scope_key(B, CacheScope.GLOBAL, SECRET)


def test_request_scope_never_repeats() -> None:
    assert compute_scope_key(A, CacheScope.REQUEST, SECRET) != compute_scope_key(A, CacheScope.REQUEST, SECRET)


def test_salt_narrows_but_cannot_join_two_orgs() -> None:
    salted_a = compute_scope_key(A, CacheScope.ORG, SECRET, cache_salt="x")
    assert salted_a != compute_scope_key(A, CacheScope.ORG, SECRET)
    assert salted_a != compute_scope_key(B, CacheScope.ORG, SECRET, cache_salt="x")


def test_field_boundaries_do_not_collide() -> None:
    one = TenantIdentity("ab", "c")
    two = TenantIdentity("a", "bc")
    assert compute_scope_key(one, CacheScope.WORKSPACE, SECRET) != compute_scope_key(two, CacheScope.WORKSPACE, SECRET)


def test_secret_decides_the_key() -> None:
    assert compute_scope_key(A, CacheScope.ORG, SECRET) != compute_scope_key(A, CacheScope.ORG, b"t" * 32)


def test_bad_scope_and_empty_secret_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown cache scope"):
        CacheScope.parse("tenant")
    with pytest.raises(ConfigError):
        compute_scope_key(A, CacheScope.ORG, b"")
