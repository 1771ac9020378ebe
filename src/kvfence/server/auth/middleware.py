"""Authentication: ``Authorization: Bearer <key>`` to a tenant, as pure ASGI middleware.

The tenant found here is the only source of a request's cache scope (I5): handlers read it from
``scope["state"]["tenant"]`` and never from the body.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from kvfence.scope import TenantIdentity
from kvfence.server.api_errors import APIError
from kvfence.server.auth.keys import ApiKey, KeyRing
from kvfence.server.openai.native_apis import anthropic_shaped

__all__ = ["LOCAL_TENANT", "AuthMiddleware", "Tenant", "bearer_token"]


@dataclass(frozen=True, slots=True)
class Tenant:
    """The authenticated caller: identity plus the key's limits (None with ``--no-auth``)."""

    identity: TenantIdentity
    key: ApiKey | None = None

    @property
    def key_id(self) -> str:
        """A stable id of the API key for per-key limits."""
        return self.key.sha256 if self.key is not None else "local"

    @property
    def scope_identity(self) -> TenantIdentity:
        """The identity the cache scope is computed from (I5): the key's id, not its reusable name."""
        return self.key.scope_identity if self.key is not None else self.identity


LOCAL_TENANT = Tenant(TenantIdentity("local", "default", "local"))


def bearer_token(scope: Scope) -> str | None:
    """The key from ``Authorization: Bearer``, else from ``x-api-key`` / ``api-key`` (Anthropic- and
    Azure-style clients); a malformed Authorization header is not rescued by the others."""
    headers = dict(scope.get("headers", []))
    if b"authorization" in headers:
        scheme, _, token = headers[b"authorization"].decode("latin-1").partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    for name in (b"x-api-key", b"api-key"):
        token = headers.get(name, b"").decode("latin-1").strip()
        if token:
            return token
    return None


class AuthMiddleware:
    """Attaches a :class:`Tenant` to every request under a protected path, or answers 401."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keyring: KeyRing | None,
        is_protected: Callable[[str], bool],
        on_reject: Callable[[APIError], None] | None = None,
    ) -> None:
        self.app = app
        self.keyring = keyring  # None means --no-auth: every caller is the one local tenant
        self.is_protected = is_protected
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.is_protected(scope["path"]):
            await self.app(scope, receive, send)
            return
        tenant = self._authenticate(scope)
        if isinstance(tenant, APIError):
            if self.on_reject is not None:
                self.on_reject(tenant)
            response: Response = tenant.response()
            if scope["path"].startswith("/v1/messages"):  # Anthropic's clients read Anthropic's error shape
                response = anthropic_shaped(response)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["tenant"] = tenant
        await self.app(scope, receive, send)

    def _authenticate(self, scope: Scope) -> Tenant | APIError:
        if self.keyring is None:
            return LOCAL_TENANT
        token = bearer_token(scope)
        if token is None:
            return APIError.unauthorized(
                "missing API key: send it as 'Authorization: Bearer <key>' (keys are added with `kvfence keys add`)"
            )
        key = self.keyring.lookup(token)
        if key is None:
            return APIError.unauthorized("incorrect API key provided")
        return Tenant(key.identity, key)
