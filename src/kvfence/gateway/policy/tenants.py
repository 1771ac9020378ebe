"""Gateway tenants: API keys (stored only as SHA-256) mapped to organisation, workspace, class, limits.

Keys are random, high-entropy secrets, so an unsalted SHA-256 is enough to store them: it lets the
gateway find a tenant in O(1) without ever holding the key itself.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

from kvfence.gateway.errors import AuthenticationFailed
from kvfence.gateway.policy.schema import TenantConfig, TenantLimits
from kvfence.scope import TenantIdentity

__all__ = ["GatewayTenant", "TenantRegistry", "generate_api_key", "hash_api_key"]

KEY_PREFIX = "kvf-gw-"
# Authenticated keys remembered per process, so a key is hashed once, not on every request. Bounded:
# when full it is emptied (keys are few; an endless supply of *valid* keys does not exist).
MAX_CACHED_KEYS = 4096


def hash_api_key(api_key: str) -> str:
    """Hex SHA-256 of a gateway API key: what the policy stores."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def generate_api_key() -> str:
    """A fresh random gateway API key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class GatewayTenant:
    """An authenticated caller of the gateway."""

    name: str
    organization: str
    workspace: str
    default_class: str
    limits: TenantLimits = field(default_factory=TenantLimits)
    canaries: tuple[str, ...] = ()

    @property
    def identity(self) -> TenantIdentity:
        return TenantIdentity(organization=self.organization, workspace=self.workspace, key_name=self.name)

    @classmethod
    def from_config(cls, config: TenantConfig) -> GatewayTenant:
        return cls(
            name=config.name,
            organization=config.organization,
            workspace=config.workspace,
            default_class=config.default_class,
            limits=config.limits,
            canaries=tuple(config.canaries),
        )


class TenantRegistry:
    """Looks a tenant up by the bearer key a request carries."""

    def __init__(self, tenants: list[TenantConfig]) -> None:
        self._by_hash = {t.key_sha256: GatewayTenant.from_config(t) for t in tenants}
        self._by_name = {t.name: tenant for t in tenants for tenant in [self._by_hash[t.key_sha256]]}
        # Only keys that authenticated are kept (an unknown key is hashed every time: nobody can fill
        # the cache with guesses). A dict lookup by the key string leaks no key bits through timing:
        # str hashing is keyed per process (SipHash) and the final equality compare runs only on a
        # 64-bit hash match, i.e. on the right key.
        self._by_token: dict[str, GatewayTenant] = {}

    def __len__(self) -> int:
        return len(self._by_hash)

    def __iter__(self) -> Iterator[GatewayTenant]:
        return iter(self._by_name.values())

    def by_name(self, name: str) -> GatewayTenant | None:
        return self._by_name.get(name)

    def authenticate(self, authorization: str | None, api_key: str | None = None) -> GatewayTenant:
        """Tenant for ``Authorization: Bearer KEY`` (or an ``api-key`` / ``x-api-key`` header, as
        Azure-style and some SDK clients send it), or :class:`AuthenticationFailed`."""
        if not authorization and api_key:
            authorization = "Bearer " + api_key.strip()
        if not authorization:
            raise AuthenticationFailed("missing API key: send `Authorization: Bearer <gateway key>`")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationFailed("malformed Authorization header: expected `Bearer <gateway key>`")
        tenant = self._by_token.get(token)
        if tenant is not None:
            return tenant
        # Lookup by digest: timing can only reveal bits of a hash, never of the key itself.
        tenant = self._by_hash.get(hash_api_key(token))
        if tenant is None:
            raise AuthenticationFailed("unknown API key")
        if len(self._by_token) >= MAX_CACHED_KEYS:
            self._by_token.clear()
        self._by_token[token] = tenant
        return tenant
