"""Cache scopes: who may share prefix-cache pages with whom (invariant I5 of DESIGN.md).

The scope key of a request is computed by the server from the *authenticated* identity and a
server-side secret, never from a field the client sends. A client ``cache_salt`` is mixed in
after the identity, so it can only split a scope further, never join two scopes.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from kvfence.errors import ConfigError

__all__ = ["UNSHARED_PREFIX", "CacheScope", "TenantIdentity", "compute_scope_key", "is_unshared"]


class CacheScope(enum.StrEnum):
    """How widely prefix-cache pages are shared."""

    GLOBAL = "global"  # one organisation owns the whole server; everybody shares
    ORG = "org"
    WORKSPACE = "workspace"
    KEY = "key"
    REQUEST = "request"  # no sharing at all

    @classmethod
    def parse(cls, value: str | CacheScope) -> CacheScope:
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(s.value for s in cls)
            raise ConfigError(f"unknown cache scope {value!r}; choose one of: {choices}") from None


@dataclass(frozen=True, slots=True)
class TenantIdentity:
    """An authenticated caller: organisation, workspace and API-key name."""

    organization: str
    workspace: str = "default"
    key_name: str = "default"


UNSHARED_PREFIX = b"kvfence-unshared:"


def is_unshared(scope_key: bytes) -> bool:
    """True for a per-request scope key (``scope=REQUEST``): its pages are never cached."""
    return scope_key.startswith(UNSHARED_PREFIX)


def compute_scope_key(
    identity: TenantIdentity,
    scope: CacheScope,
    secret: bytes,
    *,
    cache_salt: str | None = None,
) -> bytes:
    """Return the 32-byte scope key: an HMAC-SHA256 of the identity fields the scope covers.

    ``scope=REQUEST`` returns a fresh random key on every call, so nothing is ever shared; such a key
    starts with :data:`UNSHARED_PREFIX` (an HMAC key is exactly 32 bytes, so the two never meet), and
    the block manager never seals pages under it: they are scrubbed when the request ends instead of
    waiting, unreachable, in the prefix cache until eviction (I2).
    Fields are length-prefixed so that ``("ab", "c")`` and ``("a", "bc")`` never collide.
    """
    if not secret:
        raise ConfigError("the cache-scope secret must not be empty")
    if scope is CacheScope.REQUEST:
        return UNSHARED_PREFIX + secrets.token_bytes(32)
    fields: list[str] = [scope.value]
    if scope is not CacheScope.GLOBAL:
        fields.append(identity.organization)
    if scope in (CacheScope.WORKSPACE, CacheScope.KEY):
        fields.append(identity.workspace)
    if scope is CacheScope.KEY:
        fields.append(identity.key_name)
    if cache_salt is not None:
        fields.append("salt:" + cache_salt)
    message = b"".join(len(f.encode()).to_bytes(4, "big") + f.encode() for f in fields)
    return hmac.new(secret, message, hashlib.sha256).digest()
