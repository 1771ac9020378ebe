"""Routing by class on the shipped sample policy (the incident write-ups' deployment table), and properties."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.gateway.errors import GatewayRequestError, ModelNotFound, RouteDenied
from kvfence.gateway.hooks import RequestContext
from kvfence.gateway.policy.accounts import UpstreamAccounts
from kvfence.gateway.policy.loader import load_policy
from kvfence.gateway.policy.schema import Policy, TrustTier
from kvfence.gateway.policy.tenants import GatewayTenant
from kvfence.gateway.routing.classes import BackendView, choose_backends, effective_cache_scope, version_tuple
from kvfence.scope import CacheScope

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway.yaml"
ENV = {"HOSTED_API_KEY": "k-hosted", "ACME_DEDICATED_KEY": "k-acme", "GLOBEX_DEDICATED_KEY": "k-globex"}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(SAMPLE)


def views(policy: Policy, tenant: GatewayTenant, env: dict[str, str] = ENV,
          capacity: dict[str, tuple[int, int]] | None = None) -> list[BackendView]:
    accounts = UpstreamAccounts(policy.backends, [GatewayTenant.from_config(t) for t in policy.tenants], env)
    out = []
    for b in policy.backends:
        account = accounts.for_tenant(b, tenant)
        advertised, held = (capacity or {}).get(b.name, (b.facts.advertised_context, b.facts.kv_capacity_tokens))
        out.append(BackendView(b, account.kind, account.merged, advertised, held))
    return out


def tenant(policy: Policy, name: str) -> GatewayTenant:
    return next(GatewayTenant.from_config(t) for t in policy.tenants if t.name == name)


def allowed(policy: Policy, who: str, data_class: str, **kw: object) -> list[str]:
    t = tenant(policy, who)
    return [b.name for b in choose_backends(policy, t, data_class, "general-large", views(policy, t, **kw)).allowed]  # type: ignore[arg-type]


def test_public_goes_to_shared_backends(policy: Policy) -> None:
    assert allowed(policy, "globex", "public")[:2] == ["shared-vllm", "dedicated-hosted"]
    assert "hosted-shared" in allowed(policy, "globex", "public")


def test_internal_needs_workspace_cache_isolation(policy: Policy) -> None:
    t = tenant(policy, "acme-eng")
    decision = choose_backends(policy, t, "internal", "general-large", views(policy, t))
    assert decision.allowed[0].name == "shared-vllm"  # salted per workspace
    # one shared provider account = every gateway tenant in one cache
    assert "shared at global scope" in decision.refused["hosted-shared"]


def test_board_material_needs_dedicated_and_own_account(policy: Policy) -> None:
    names = allowed(policy, "acme-board", "board", capacity={"onprem-kvfence": (4096, 8192)})
    assert names == ["dedicated-hosted", "onprem-kvfence"]
    t = tenant(policy, "acme-board")
    refused = choose_backends(policy, t, "board", "general-large", views(policy, t)).refused
    assert "tier shared not allowed" in refused["shared-vllm"]
    assert refused["acme-hr-dedicated"] == "dedicated to other tenants"
    assert "KV capacity unknown" in refused["onprem-kvfence"]  # nothing discovered yet: fail closed


def test_merged_upstream_credentials_are_refused(policy: Policy) -> None:
    # Same secret for two organisations: the provider sees one account, so the route is refused.
    env = {**ENV, "GLOBEX_DEDICATED_KEY": "k-acme"}
    t = tenant(policy, "acme-board")
    decision = choose_backends(policy, t, "board", "general-large",
                               views(policy, t, env=env, capacity={"onprem-kvfence": (4096, 8192)}))
    assert [b.name for b in decision.allowed] == ["onprem-kvfence"]
    assert "dedicated-hosted" in decision.refused


def test_hr_goes_on_prem_or_to_the_departments_own_backend(policy: Policy) -> None:
    cap = {"onprem-kvfence": (4096, 8192)}
    assert allowed(policy, "acme-hr", "hr", capacity=cap) == ["acme-hr-dedicated", "onprem-kvfence"]
    # another department's HR-class request may not use acme/hr's backend nor an org-wide dedicated one
    assert allowed(policy, "acme-eng", "hr", capacity=cap) == ["onprem-kvfence"]


def test_over_advertised_backend_refused_for_strict_classes(policy: Policy) -> None:
    cap = {"onprem-kvfence": (1_048_576, 681_280)}  # the incident's figures
    t = tenant(policy, "acme-hr")
    decision = choose_backends(policy, t, "hr", "general-large", views(policy, t, capacity=cap))
    assert "advertises 1048576 tokens" in decision.refused["onprem-kvfence"]


def test_advisory_engine_refused(policy: Policy) -> None:
    old = policy.model_copy(deep=True)
    backend = old.backends[1].model_copy(update={"facts": old.backends[1].facts.model_copy(
        update={"engine_version": "0.8.4"})})
    old = old.model_copy(update={"backends": [old.backends[0], backend, *old.backends[2:]]})
    t = tenant(old, "acme-eng")
    decision = choose_backends(old, t, "internal", "general-large", views(old, t))
    assert "CVE-2025-46570" in decision.refused["shared-vllm"]


def test_no_backend_is_403_and_unknown_model_404(policy: Policy) -> None:
    t = tenant(policy, "globex")
    with pytest.raises(RouteDenied, match="failing closed"):
        choose_backends(policy, t, "hr", "general-large", views(policy, t))
    with pytest.raises(ModelNotFound):
        choose_backends(policy, t, "public", "nope", views(policy, t))


def test_salt_narrows_effective_scope(policy: Policy) -> None:
    t = tenant(policy, "acme-eng")
    vllm = next(v for v in views(policy, t) if v.config.name == "shared-vllm")
    assert effective_cache_scope(vllm, CacheScope.WORKSPACE) is CacheScope.WORKSPACE
    hosted = next(v for v in views(policy, t) if v.config.name == "hosted-shared")
    assert effective_cache_scope(hosted, CacheScope.WORKSPACE) is CacheScope.GLOBAL


def test_versions() -> None:
    assert version_tuple("0.8.5.post1") < version_tuple("0.9.0") < version_tuple("v0.10.1")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["public", "internal", "board", "legal", "hr"]), min_size=1, max_size=6),
       st.sampled_from(["acme-eng", "acme-board", "acme-hr", "globex"]))
def test_class_only_rises_and_routes_respect_tiers(policy: Policy, raises: list[str], who: str) -> None:
    t = tenant(policy, who)
    ctx = RequestContext("r", t, t.default_class, None, "chat", class_order=policy.class_names())
    ranks = [ctx.class_rank(ctx.data_class)]
    for name in raises:
        ctx.raise_class(name, reason="test")
        ranks.append(ctx.class_rank(ctx.data_class))
    assert ranks == sorted(ranks)  # never lowered
    try:
        decision = choose_backends(policy, t, ctx.data_class, "general-large",
                                   views(policy, t, capacity={"onprem-kvfence": (4096, 8192)}))
    except RouteDenied:
        return
    klass = policy.data_class(ctx.data_class)
    for backend in decision.allowed:
        assert backend.tier in klass.allowed_tiers
        assert not backend.dedicated_to or any(o in (t.organization, f"{t.organization}/{t.workspace}")
                                               for o in backend.dedicated_to)
        if backend.tier is TrustTier.SHARED:
            assert klass.name in ("public", "internal")


def test_unknown_class_name_is_a_request_error(policy: Policy) -> None:
    ctx = RequestContext("r", tenant(policy, "globex"), "public", None, "chat", class_order=policy.class_names())
    with pytest.raises(GatewayRequestError, match="unknown data class"):
        ctx.raise_class("secret")
