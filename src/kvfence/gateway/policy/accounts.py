"""Upstream credentials: which account a tenant's requests use on each backend.

A gateway that funnels many customers through one provider account undoes the provider's
per-account cache isolation. Credentials may therefore be given per organisation or per tenant;
this module resolves them from the environment once, and notices when two organisations'
credentials are in fact the same secret (then they are merged, whatever the file says).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from kvfence.errors import ConfigError
from kvfence.gateway.policy.schema import BackendConfig
from kvfence.gateway.policy.tenants import GatewayTenant

__all__ = ["UpstreamAccount", "UpstreamAccounts"]


@dataclass(frozen=True, slots=True)
class UpstreamAccount:
    kind: str                    # "tenant" | "organization" | "shared" | "none"
    headers: Mapping[str, str]   # what to send upstream (never the caller's gateway key)
    merged: bool                 # the same secret also serves other organisations


class UpstreamAccounts:
    """Resolves every backend's credentials once, at start-up."""

    def __init__(self, backends: list[BackendConfig], tenants: list[GatewayTenant],
                 env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self._backends = {b.name: b for b in backends}
        self._secrets: dict[tuple[str, str, str], str] = {}
        self._merged: dict[tuple[str, str, str], bool] = {}
        org_of = {t.name: t.organization for t in tenants}
        for index, backend in enumerate(backends):
            auth = backend.auth
            entries: list[tuple[str, str, str]] = []
            if auth.api_key_env:
                entries.append(("shared", "*", auth.api_key_env))
            entries += [("organization", org, var) for org, var in auth.per_organization.items()]
            entries += [("tenant", name, var) for name, var in auth.per_tenant.items()]
            owners_by_secret: dict[str, set[str]] = {}
            for kind, owner, var in entries:
                value = env.get(var)
                if not value:
                    field = "api_key_env" if kind == "shared" else f"per_{kind}.{owner}"
                    raise ConfigError(f"backends[{index}] ({backend.name}).auth.{field}: environment "
                                      f"variable {var} is not set")
                self._secrets[(backend.name, kind, owner)] = value
                org = owner if kind == "organization" else org_of.get(owner, "*") if kind == "tenant" else "*"
                owners_by_secret.setdefault(hashlib.sha256(value.encode()).hexdigest(), set()).add(org)
            for kind, owner, _ in entries:
                digest = hashlib.sha256(self._secrets[(backend.name, kind, owner)].encode()).hexdigest()
                orgs = owners_by_secret[digest]
                self._merged[(backend.name, kind, owner)] = len(orgs) > 1 or ("*" in orgs and kind != "shared")

    def for_tenant(self, backend: BackendConfig, tenant: GatewayTenant) -> UpstreamAccount:
        """The upstream account this tenant's requests use on ``backend``."""
        for kind, owner in (("tenant", tenant.name), ("organization", tenant.organization), ("shared", "*")):
            secret = self._secrets.get((backend.name, kind, owner))
            if secret is None:
                continue
            auth = backend.auth
            value = f"{auth.scheme} {secret}" if auth.scheme else secret
            merged = self._merged[(backend.name, kind, owner)] or kind == "shared"
            return UpstreamAccount(kind, {auth.header: value}, merged)
        return UpstreamAccount("none", {}, True)
