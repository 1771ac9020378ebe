"""Secret cache salts: the gateway, not the client, decides who shares a backend's prompt cache.

A caller-supplied ``cache_salt`` is a convention, not a wall: whoever learns a tenant's salt shares
its cache. The gateway therefore always strips the client's salt and, for backends that accept one,
sets an HMAC of the tenant's scope under the gateway secret (invariant I5, applied at the gateway).
"""

from __future__ import annotations

import base64
from typing import Any

from kvfence.engine.scope import CacheScope, compute_scope_key
from kvfence.gateway.tenants import GatewayTenant

__all__ = ["CLIENT_SALT_FIELDS", "apply_cache_salt", "tenant_cache_salt"]

# Fields through which a client could try to pick its own cache partition.
CLIENT_SALT_FIELDS = ("cache_salt", "prompt_cache_key")


def tenant_cache_salt(tenant: GatewayTenant, scope: CacheScope, secret: bytes) -> str:
    """Unpredictable salt for the tenant at ``scope`` (a fresh random one for scope=request)."""
    key = compute_scope_key(tenant.identity, scope, secret)
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


def apply_cache_salt(body: dict[str, Any], salt: str | None) -> bool:
    """Strip any client salt from ``body`` and set ``salt`` if given; True if the client sent one (I5)."""
    stripped = False
    for name in CLIENT_SALT_FIELDS:
        if name in body:
            del body[name]
            stripped = True
    if salt is not None:
        body["cache_salt"] = salt
    return stripped
