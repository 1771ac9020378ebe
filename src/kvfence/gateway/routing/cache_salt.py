"""Secret cache salts: the gateway, not the client, decides who shares a backend's prompt cache.

A caller-supplied ``cache_salt`` is a convention, not a wall: whoever learns a tenant's salt shares
its cache. The gateway therefore always strips the client's salt and, for backends that accept one,
sets an HMAC of the tenant's scope under the gateway secret (invariant I5, applied at the gateway).
"""

from __future__ import annotations

import base64
from typing import Any

from kvfence.gateway.policy.tenants import GatewayTenant
from kvfence.scope import CacheScope, compute_scope_key

__all__ = ["CLIENT_SALT_FIELDS", "apply_cache_salt", "is_client_salt_field", "tenant_cache_salt"]

# Fields through which a client could try to pick its own cache partition.
CLIENT_SALT_FIELDS = ("cache_salt", "prompt_cache_key")
_SALT_NAMES = frozenset(name.replace("_", "") for name in CLIENT_SALT_FIELDS)
# Objects some clients and proxies merge into the top level before a backend reads the body (the
# ``openai`` client does it on the caller's side; a raw body may still carry one).
_MERGED_OBJECTS = ("extra_body",)


def is_client_salt_field(name: str) -> bool:
    """``cache_salt`` / ``prompt_cache_key`` under any casing or separator (``Cache-Salt``,
    ``cacheSalt``): a backend or proxy that matches field names loosely would take any of them."""
    return name.lower().replace("_", "").replace("-", "") in _SALT_NAMES


# The top-level field names every request sends (model, messages, stream, max_tokens ...) are a
# handful: their verdicts are remembered, bounded, so the common body is checked by one lookup per
# field. Field names come from callers: an endless supply of new ones empties it, never grows it.
_KNOWN_FIELDS: dict[str, bool] = {}
_MAX_KNOWN_FIELDS = 1024


def _is_salt_field_cached(name: str) -> bool:
    verdict = _KNOWN_FIELDS.get(name)
    if verdict is None:
        verdict = is_client_salt_field(name)
        if len(_KNOWN_FIELDS) >= _MAX_KNOWN_FIELDS:
            _KNOWN_FIELDS.clear()
        _KNOWN_FIELDS[name] = verdict
    return verdict


def tenant_cache_salt(tenant: GatewayTenant, scope: CacheScope, secret: bytes) -> str:
    """Unpredictable salt for the tenant at ``scope`` (a fresh random one for scope=request)."""
    key = compute_scope_key(tenant.identity, scope, secret)
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


def _strip(body: dict[str, Any]) -> bool:
    stripped = False
    for name in [k for k in body if isinstance(k, str) and _is_salt_field_cached(k)]:
        del body[name]
        stripped = True
    for name in _MERGED_OBJECTS:
        nested = body.get(name)
        if isinstance(nested, dict):
            copy = dict(nested)  # the caller's nested object is not changed in place
            if _strip(copy):
                body[name] = copy
                stripped = True
    return stripped


def apply_cache_salt(body: dict[str, Any], salt: str | None) -> bool:
    """Strip any client salt from ``body`` (top level, any casing, and inside ``extra_body``) and set
    ``salt`` if given; True if the client sent one (I5)."""
    stripped = _strip(body)
    if salt is not None:
        body["cache_salt"] = salt
    return stripped
