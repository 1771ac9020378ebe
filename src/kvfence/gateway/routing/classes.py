"""Routing by data class: which backends may receive a request, in which order, and why not the others.

Pure policy logic, no I/O: the caller passes what is known about each backend right now (discovered
capacity, upstream accounts). A backend is allowed for a class only if every requirement holds; an
unknown fact never satisfies a requirement (fail closed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvfence.gateway.errors import ModelNotFound, RouteDenied
from kvfence.gateway.policy.schema import (
    Advisory,
    BackendConfig,
    DataClassConfig,
    Policy,
    TrustTier,
    UpstreamCacheScope,
    scope_width,
)
from kvfence.gateway.policy.tenants import GatewayTenant
from kvfence.scope import CacheScope

__all__ = [
    "AccountKind",
    "BackendView",
    "RouteDecision",
    "choose_backends",
    "effective_cache_scope",
    "refusal_reason",
    "requested_classes",
    "salt_scope",
    "version_tuple",
]

AccountKind = str  # "tenant" | "organization" | "shared" | "none"


def requested_classes(values: Sequence[str]) -> list[str]:
    """The class names an ``X-Data-Class`` header asks for: every occurrence of the header and every
    comma-separated item (HTTP joins repeated fields with commas), blanks dropped. The caller raises
    the request to each in turn, so the most sensitive one wins and a second header can never lower
    what the first asked (a proxy or client library that adds its own header does not undo the
    caller's)."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


@dataclass(frozen=True, slots=True)
class BackendView:
    """What routing needs to know about one backend at this moment, for one tenant."""

    config: BackendConfig
    account_kind: AccountKind          # whose upstream credential this tenant's requests would use
    account_merged: bool = False       # that credential is also used by other organisations/tenants
    advertised_context: int | None = None
    kv_capacity_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Allowed backends in try order, and the reason each other backend serving the model was refused."""

    data_class: str
    allowed: tuple[BackendConfig, ...]
    refused: Mapping[str, str]


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.8.5.post1"`` -> ``(0, 8, 5)``: the numeric release part only."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip().lstrip("vV"))
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(p) for p in match.group(0).split("."))


def _narrower(a: CacheScope, b: CacheScope) -> CacheScope:
    return a if scope_width(a) <= scope_width(b) else b


def salt_scope(policy: Policy, data_class: DataClassConfig) -> CacheScope:
    """The scope the gateway salts a tenant's requests at: its default, narrowed by the class."""
    scope = policy.gateway.cache_salt_scope
    if data_class.requires.max_cache_scope is not None:
        scope = _narrower(scope, data_class.requires.max_cache_scope)
    return scope


def effective_cache_scope(view: BackendView, salt: CacheScope) -> CacheScope:
    """How widely this tenant's prompts can share prefix cache upstream, seen from the gateway.

    A per-account cache behind one shared credential merges every tenant of the gateway (the
    "gateway undoes provider isolation" failure); a gateway salt narrows it where accepted.
    """
    facts = view.config.facts
    if facts.cache_scope is UpstreamCacheScope.NONE:
        scope = CacheScope.REQUEST
    elif facts.cache_scope is UpstreamCacheScope.GLOBAL or view.account_merged:
        scope = CacheScope.GLOBAL
    elif view.account_kind == "tenant":
        scope = CacheScope.KEY
    elif view.account_kind == "organization":
        scope = CacheScope.ORG
    else:
        scope = CacheScope.GLOBAL
    if view.config.accepts_cache_salt:
        scope = _narrower(scope, salt)
    return scope


def _serves_tenant(backend: BackendConfig, tenant: GatewayTenant) -> bool:
    if not backend.dedicated_to:
        return True
    return any(owner in (tenant.organization, f"{tenant.organization}/{tenant.workspace}")
               for owner in backend.dedicated_to)


def _advisory_hit(backend: BackendConfig, advisories: Sequence[Advisory]) -> str | None:
    engine, version = backend.facts.engine, backend.facts.engine_version
    if engine is None:
        return "engine unknown (vendor facts name no engine)"
    for advisory in advisories:
        if advisory.engine.lower() != engine.lower():
            continue
        if version is None:
            return f"{engine} version unknown and {advisory.id} affects {engine} < {advisory.fixed_in}"
        if version_tuple(version) < version_tuple(advisory.fixed_in):
            return f"{engine} {version} is affected by {advisory.id} (fixed in {advisory.fixed_in})"
    return None


def refusal_reason(
    policy: Policy, data_class: DataClassConfig, tenant: GatewayTenant, view: BackendView
) -> str | None:
    """Why ``view`` may not receive a request of ``data_class`` from ``tenant``; None if it may."""
    backend, req = view.config, data_class.requires
    if not _serves_tenant(backend, tenant):
        return "dedicated to other tenants"
    if backend.tier not in data_class.allowed_tiers:
        allowed = ", ".join(t.value for t in data_class.allowed_tiers)
        return f"tier {backend.tier.value} not allowed for class {data_class.name} (allowed: {allowed})"
    if req.dedicated_per is not None and backend.tier is TrustTier.DEDICATED:
        own = {tenant.organization} if req.dedicated_per == "organization" else set()
        own.add(f"{tenant.organization}/{tenant.workspace}")
        if not backend.dedicated_to or not set(backend.dedicated_to) <= own:
            return f"class {data_class.name} needs a backend dedicated per {req.dedicated_per}"
    if req.max_cache_scope is not None:
        scope = effective_cache_scope(view, salt_scope(policy, data_class))
        if scope_width(scope) > scope_width(req.max_cache_scope):
            return (f"prompt cache shared at {scope.value} scope; class {data_class.name} "
                    f"allows at most {req.max_cache_scope.value}")
    # On our own hardware there is no provider account to merge tenants into; the cache scope
    # requirement above still applies there.
    if req.distinct_upstream_account and backend.tier is not TrustTier.ON_PREM and (
            view.account_kind not in ("tenant", "organization") or view.account_merged):
        return ("would merge tenants under one upstream account; class "
                f"{data_class.name} needs a credential per organisation or tenant")
    if req.max_retention_days is not None:
        days = backend.facts.retention_days
        if days is None:
            return "prompt retention unknown"
        if days > req.max_retention_days:
            return f"retains prompts {days} days (class allows {req.max_retention_days})"
    if req.no_advisory_engine:
        hit = _advisory_hit(backend, policy.advisories)
        if hit is not None:
            return hit
    if req.context_within_capacity:
        if view.kv_capacity_tokens is None:
            return "KV capacity unknown (cannot prove the advertised context fits)"
        if view.advertised_context is not None and view.advertised_context > view.kv_capacity_tokens:
            return (f"advertises {view.advertised_context} tokens of context but holds only "
                    f"{view.kv_capacity_tokens} in its KV cache")
    return None


def choose_backends(
    policy: Policy,
    tenant: GatewayTenant,
    data_class: str,
    model: str,
    views: Sequence[BackendView],
) -> RouteDecision:
    """Backends allowed for this request, best first (priority, then file order); fail closed if none."""
    klass = policy.data_class(data_class)
    serving = [v for v in views if v.config.serves(model)]
    if not serving:
        raise ModelNotFound(f"no backend serves model {model!r}", param="model")
    allowed: list[tuple[int, int, BackendConfig]] = []
    refused: dict[str, str] = {}
    for order, view in enumerate(serving):
        reason = refusal_reason(policy, klass, tenant, view)
        if reason is None:
            allowed.append((view.config.priority, order, view.config))
        else:
            refused[view.config.name] = reason
    if not allowed:
        detail = "; ".join(f"{name}: {why}" for name, why in refused.items())
        raise RouteDenied(f"no backend is allowed for data class {data_class!r} (failing closed): {detail}")
    allowed.sort(key=lambda item: (item[0], item[1]))
    return RouteDecision(data_class, tuple(b for _, _, b in allowed), refused)
