"""Everything a running gateway holds: policy, tenants, backends' live state, hooks, log, metrics.

Built once from a validated policy (``GatewayRuntime.create``); ``start()`` opens connection pools
and discovers capacity, ``close()`` releases them. The request path is in ``proxy.py``.

A policy reload (``reload.py``: SIGHUP, ``kvfence gateway reload``) builds a *generation*: a shallow copy
of the runtime whose policy-derived parts (policy, tenants, accounts, backends, token counters, hooks,
route caches) are new and whose process-lifetime parts (audit log, metrics, limiter, connection pools of
unchanged backends, leak index) are shared. A request pins the generation current when it starts
(``pinned()``, the first thing ``handle_completion`` does) and finishes under it; the runtime the app
holds mirrors the newest generation for everything else (``/v1/models``, ``/health``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kvfence.errors import ConfigError
from kvfence.gateway.admission.capacity import CapacityInfo, discover_capacity
from kvfence.gateway.admission.limits import Limiter, TenantLimiter
from kvfence.gateway.admission.limits_redis import RedisTenantLimiter
from kvfence.gateway.admission.tokens import TokenCounter, load_counter
from kvfence.gateway.hooks import RequestHook
from kvfence.gateway.policy.accounts import UpstreamAccounts
from kvfence.gateway.policy.plans import PlanCache, UpstreamPlan
from kvfence.gateway.policy.schema import BackendConfig, DataClassConfig, Policy
from kvfence.gateway.policy.tenants import GatewayTenant, TenantRegistry
from kvfence.gateway.records.audit_log import AuditLog
from kvfence.gateway.records.metrics import GatewayMetrics
from kvfence.gateway.routing.cache_salt import tenant_cache_salt
from kvfence.gateway.routing.classes import BackendView, RouteDecision, choose_backends, salt_scope
from kvfence.gateway.transport.quiet_time import QuietTime
from kvfence.gateway.transport.upstream import UpstreamClient, make_upstream_client
from kvfence.gateway.workers.metrics import PeerMetricsServer, WorkerInfo
from kvfence.metrics_key import MetricsKeyFile
from kvfence.scope import CacheScope

__all__ = ["BackendState", "GatewayRuntime", "load_hooks"]

log = logging.getLogger("kvfence.gateway")


@dataclass
class BackendState:
    """Live knowledge about one backend."""

    config: BackendConfig
    client: UpstreamClient
    counter: TokenCounter
    capacity: CapacityInfo
    down_until: float = 0.0
    last_error: str | None = None
    reported_up: bool = False

    def is_down(self, now: float) -> bool:
        return now < self.down_until


def load_hooks(policy: Policy, audit: AuditLog, metrics: GatewayMetrics) -> list[RequestHook]:
    """Hooks from ``kvfence.gateway.protection.build_hooks`` (when installed) and ``gateway.hooks``."""
    hooks: list[RequestHook] = []
    factories: list[tuple[str, Any]] = []
    protection = None
    if policy.gateway.load_protection:
        try:
            protection = importlib.import_module("kvfence.gateway.protection")
        except ModuleNotFoundError as exc:
            if exc.name != "kvfence.gateway.protection":
                raise
    if protection is not None and hasattr(protection, "build_hooks"):
        factories.append(("kvfence.gateway.protection:build_hooks", protection.build_hooks))
    for spec in policy.gateway.hooks:
        module_name, _, attr = spec.partition(":")
        try:
            factories.append((spec, getattr(importlib.import_module(module_name), attr)))
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"gateway.hooks: cannot load {spec!r}: {exc}") from exc
    for spec, factory in factories:
        built = factory(policy, incidents=audit, registry=metrics.registry)
        hooks.extend(built or [])
        log.info("loaded %d hook(s) from %s", len(built or []), spec)
    return hooks


class GatewayRuntime:
    """Shared state of one gateway process."""

    def __init__(
        self,
        policy: Policy,
        *,
        secret: bytes | None,
        audit: AuditLog,
        hooks: list[RequestHook],
        metrics: GatewayMetrics,
        accounts: UpstreamAccounts,
        counters: Mapping[str, TokenCounter],
        metrics_key: MetricsKeyFile | None = None,
    ) -> None:
        self.policy = policy
        self.metrics_key = metrics_key  # gateway.metrics_key_file: who may read per-tenant /metrics
        self.secret = secret
        self.audit = audit
        self.hooks = hooks
        self.metrics = metrics
        self.accounts = accounts
        self.tenants = TenantRegistry(policy.tenants)
        window_s = policy.gateway.limit_window_s
        self.limiter: Limiter = (RedisTenantLimiter(policy.gateway.redis_url, window_s=window_s)
                                 if policy.gateway.redis_url else TenantLimiter(window_s=window_s))
        self.class_order = policy.class_names()
        self._counters = counters
        self.backends: dict[str, BackendState] = {}
        self._refresh_task: asyncio.Task[None] | None = None
        self._views: dict[str, list[BackendView]] = {}
        self.plans = PlanCache()
        # Set by the supervisor's worker processes (``kvfence gateway --workers N``), None otherwise.
        self.worker: WorkerInfo | None = None
        self._peer_metrics: PeerMetricsServer | None = None
        # a finished stream's metrics and audit row, and collection passes, wait for a quiet moment
        self.quiet = QuietTime()
        # policy reloads (reload.py): where the policy comes from, the generation requests pin, clients
        # of backends a reload removed or changed (closed with the runtime), the reload count
        self.policy_loader: Callable[[], Policy] | None = None
        self.base_dir: Path | None = None
        self.generation = 1
        self.last_reload_error: str | None = None
        self._pinned: GatewayRuntime = self
        self._retired: list[UpstreamClient] = []

    @classmethod
    def create(
        cls,
        policy: Policy,
        *,
        base_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        audit_url: str | None = None,
        hooks: list[RequestHook] | None = None,
    ) -> GatewayRuntime:
        """Resolve secrets and credentials, load tokenizers and hooks; raise ConfigError on problems."""
        env = os.environ if env is None else env
        secret_text = env.get(policy.gateway.secret_env)
        if not secret_text and any(b.accepts_cache_salt for b in policy.backends):
            raise ConfigError(
                f"gateway.secret_env: environment variable {policy.gateway.secret_env} is not set; the "
                "gateway needs a secret to derive cache salts (e.g. `export "
                f"{policy.gateway.secret_env}=$(openssl rand -hex 32)`)")
        if secret_text and len(secret_text) < 16:
            raise ConfigError(f"{policy.gateway.secret_env} is too short: use at least 16 random characters")
        tenants = [GatewayTenant.from_config(t) for t in policy.tenants]
        accounts = UpstreamAccounts(policy.backends, tenants, env)
        counters = {b.name: load_counter(b.tokenizer, base_dir) for b in policy.backends}
        metrics_key = None
        if policy.gateway.metrics_key_file is not None:
            key_path = Path(policy.gateway.metrics_key_file).expanduser()
            if base_dir is not None and not key_path.is_absolute():
                key_path = base_dir / key_path
            metrics_key = MetricsKeyFile(key_path)  # ConfigError (exit 2) when unreadable or too short
        audit = AuditLog(audit_url or _resolve_sqlite(policy.gateway.audit_log, base_dir))
        metrics = GatewayMetrics()
        try:
            built = load_hooks(policy, audit, metrics) if hooks is None else hooks
        except Exception:
            audit.close()
            raise
        runtime = cls(policy, secret=secret_text.encode() if secret_text else None, audit=audit, hooks=built,
                      metrics=metrics, accounts=accounts, counters=counters, metrics_key=metrics_key)
        runtime.base_dir = base_dir
        return runtime

    # -- generations (policy reload) --------------------------------------------------------------
    # What a reload replaces; everything else a generation shares with the runtime it came from.
    POLICY_FIELDS = ("policy", "tenants", "accounts", "class_order", "_counters", "backends", "_views", "plans",
                     "hooks", "generation")

    def pinned(self) -> GatewayRuntime:
        """The generation a request starting now runs under, to its end (never changed by a reload)."""
        return self._pinned

    def generation_for(self, policy: Policy, *, accounts: UpstreamAccounts, counters: Mapping[str, TokenCounter],
                       hooks: list[RequestHook], backends: dict[str, BackendState]) -> GatewayRuntime:
        """A new generation under ``policy`` (not yet current: :meth:`make_current`)."""
        current = self._pinned
        generation = copy.copy(current)
        generation.policy = policy
        generation.tenants = TenantRegistry(policy.tenants)
        generation.accounts = accounts
        generation.class_order = policy.class_names()
        generation._counters = counters
        generation.hooks = hooks
        generation.backends = backends
        generation._views = {}
        generation.plans = PlanCache()
        generation.generation = current.generation + 1
        generation._pinned = generation
        return generation

    def make_current(self, generation: GatewayRuntime) -> None:
        """Swap: requests from now on pin ``generation``; those in flight keep theirs. One event-loop step,
        so no request sees half of it."""
        for name in self.POLICY_FIELDS:
            setattr(self, name, getattr(generation, name))
        self._pinned = generation

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        # from here on requests pin a generation, and the first one must not change when this object
        # mirrors a reload
        self._pinned = copy.copy(self)
        self._pinned._pinned = self._pinned
        for backend in self.policy.backends:
            client = make_upstream_client(backend)
            facts = backend.facts
            self.backends[backend.name] = BackendState(
                backend, client, self._counters[backend.name],
                CapacityInfo(facts.advertised_context, facts.kv_capacity_tokens, "policy"))
        await self.refresh_capacity()
        if self.worker is not None and self.worker.count > 1:
            self._peer_metrics = PeerMetricsServer(self.metrics.registry, self.worker, before=self.quiet.drain)
            await self._peer_metrics.start()
        if self.policy.gateway.capacity_refresh_s > 0:
            self._refresh_task = asyncio.create_task(self._refresh_loop())

    async def close(self) -> None:
        if self._peer_metrics is not None:
            await self._peer_metrics.close()
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh_task
        for hook in self.hooks:
            closer = getattr(hook, "aclose", None)
            if closer is not None:
                await closer()
        for state in self.backends.values():
            await state.client.aclose()
        for client in self._retired:
            await client.aclose()
        await self.limiter.aclose()
        self.quiet.close()  # the rows still waiting for a quiet moment, before the log closes
        self.audit.close()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.policy.gateway.capacity_refresh_s)
            try:
                await self.refresh_capacity()
            except Exception:
                log.exception("capacity refresh failed")

    async def refresh_capacity(self) -> None:
        """Discover every backend's capacity; flag those that advertise more than they hold."""
        await self.refresh_backends(list(self.backends.values()))

    async def refresh_backends(self, states: list[BackendState]) -> None:
        """Discover the capacity of ``states`` (a reload's new backends: before they take traffic)."""
        async def one(state: BackendState) -> None:
            probe = httpx.AsyncClient(timeout=httpx.Timeout(3.0), trust_env=False)
            try:
                info = await discover_capacity(probe, state.config, self._probe_headers(state.config))
            finally:
                await probe.aclose()
            state.capacity = info
            self._publish_capacity(state)
            self._views.clear()
            self.plans.clear()  # routes depend on capacity

        await asyncio.gather(*(one(s) for s in states))

    def _probe_headers(self, backend: BackendConfig) -> dict[str, str]:
        # Capacity probes carry no tenant's data; use the shared credential when there is one.
        for tenant in self.tenants:
            return dict(self.accounts.for_tenant(backend, tenant).headers)
        return {}

    def _publish_capacity(self, state: BackendState) -> None:
        name, info = state.config.name, state.capacity
        self.metrics.advertised_context.labels(name).set(info.advertised_context or 0)
        self.metrics.kv_capacity.labels(name).set(info.kv_capacity_tokens or 0)
        self.metrics.over_advertised.labels(name).set(1 if info.advertises_more_than_it_holds else 0)
        if info.advertises_more_than_it_holds:
            log.warning("backend %s advertises %s tokens of context but its KV cache holds %s (source: %s); "
                        "requests to it are capped to %s", name, info.advertised_context,
                        info.kv_capacity_tokens, info.source, info.max_context)

    # -- request-path helpers ---------------------------------------------------------------------
    def views(self, tenant: GatewayTenant) -> list[BackendView]:
        """What routing knows about each backend for this tenant (cached until capacity changes)."""
        cached = self._views.get(tenant.name)
        if cached is not None:
            return cached
        out = []
        for state in self.backends.values():
            account = self.accounts.for_tenant(state.config, tenant)
            out.append(BackendView(state.config, account.kind, account.merged,
                                   state.capacity.advertised_context, state.capacity.kv_capacity_tokens))
        self._views[tenant.name] = out
        return out

    def route(self, tenant: GatewayTenant, data_class: str, model: str) -> RouteDecision:
        """``choose_backends`` for this tenant, class and model (kept until capacity changes)."""
        return self.plans.route((tenant.name, data_class, model), lambda: choose_backends(
            self.policy, tenant, data_class, model, self.views(tenant)))

    def upstream_plan(self, state: BackendState, tenant: GatewayTenant, klass: DataClassConfig) -> UpstreamPlan:
        """Headers and cache salt of this tenant's requests of this class to this backend."""
        def build() -> UpstreamPlan:
            account = self.accounts.for_tenant(state.config, tenant)
            headers = {"content-type": "application/json", "accept-encoding": "identity", **account.headers}
            scope = None
            if state.config.accepts_cache_salt and self.secret is not None:
                scope = salt_scope(self.policy, klass)
            salt = None if scope is None or scope is CacheScope.REQUEST else tenant_cache_salt(
                tenant, scope, self.secret or b"")
            return UpstreamPlan(headers, {**headers, "accept": "text/event-stream"}, salt, scope)

        return self.plans.plan((state.config.name, tenant.name, klass.name), build)

    def mark_down(self, state: BackendState, reason: str) -> None:
        state.down_until = time.monotonic() + self.policy.gateway.backend_retry_after_s
        state.last_error = reason
        state.reported_up = False
        self.metrics.backend_up.labels(state.config.name).set(0)

    def mark_up(self, state: BackendState) -> None:
        if state.down_until or not state.reported_up:
            state.down_until = 0.0
            state.last_error = None
            state.reported_up = True  # the gauge is set on a change, not on every answer
            self.metrics.backend_up.labels(state.config.name).set(1)


def _resolve_sqlite(url: str, base_dir: Path | None) -> str:
    """Relative SQLite paths are relative to the policy file, not to wherever the gateway was started."""
    if not url.startswith("sqlite:///") or base_dir is None:
        return url
    path = url.removeprefix("sqlite:///")
    if path == ":memory:" or Path(path).is_absolute():
        return url
    return "sqlite:///" + str(base_dir / path)
