"""What several gateway worker processes must share, checked before any of them starts.

A worker process keeps its own memory: a rate limit counted there, or a leak fingerprint index kept
there, would see only the requests the kernel happened to hand that worker. With ``N`` workers a
tenant could then send ``N`` times its limit, and a leak whose prompt went through worker 1 and
whose answer goes through worker 2 would pass unseen. So with more than one worker:

- tenant limits that hold state (requests/tokens per minute, concurrent requests) need
  ``gateway.redis_url``, unless ``gateway.worker_limits: split`` asks for each worker to enforce its
  share (``limit // workers``, at least 1) on its own;
- leak detection needs its fingerprint index in Redis (``gateway.protection.leak.index: redis``).

:func:`shared_state_problems` names every such problem; the supervisor refuses to start on any.
"""

from __future__ import annotations

import importlib
from typing import Any

from kvfence.gateway.policy.schema import Policy, TenantConfig, TenantLimits

__all__ = ["shared_state_problems", "split_limits"]

_STATEFUL_LIMITS = ("requests_per_minute", "tokens_per_minute", "max_concurrent")


def _stateful(limits: TenantLimits) -> list[str]:
    return [name for name in _STATEFUL_LIMITS if getattr(limits, name) is not None]


def _leak_index_in_process(policy: Policy) -> bool:
    """Whether the protection hooks would keep leak fingerprints in this process's memory."""
    if not policy.gateway.load_protection:
        return False
    try:
        config_module: Any = importlib.import_module("kvfence.gateway.protection.config")
    except ModuleNotFoundError:
        return False  # the protection part is not installed: no leak index at all
    config = config_module.parse_protection_config(policy.gateway.protection)
    return bool(config.enabled and config.leak.enabled and config.leak.index == "memory")


def shared_state_problems(policy: Policy, workers: int) -> list[str]:
    """Why ``workers`` processes could not share this policy's state correctly (empty: they can)."""
    if workers <= 1:
        return []
    problems = []
    settings = policy.gateway
    if settings.redis_url is None and settings.worker_limits == "shared":
        limited = [f"{t.name} ({', '.join(_stateful(t.limits))})" for t in policy.tenants if _stateful(t.limits)]
        if limited:
            shown = ", ".join(limited[:5]) + (f" and {len(limited) - 5} more" if len(limited) > 5 else "")
            problems.append(
                f"gateway.workers is {workers} but tenant limits are counted per process without "
                f"gateway.redis_url: each worker would allow the whole limit, {workers} times it in all "
                f"(tenants {shown}). Set gateway.redis_url so the workers share the counts, or "
                f"gateway.worker_limits: split to give each worker limit // {workers}.")
    if _leak_index_in_process(policy):
        problems.append(
            f"gateway.workers is {workers} but leak detection keeps its fingerprint index in process "
            "memory: a prompt seen by one worker would be unknown to the others, so a leak into an "
            "answer served by another worker would pass. Set gateway.protection.leak.index: redis with "
            "leak.redis_url (and the gateway secret), or run one worker.")
    return problems


def split_limits(policy: Policy, workers: int) -> Policy:
    """The policy one of ``workers`` workers enforces under ``worker_limits: split``: every stateful
    tenant limit divided by ``workers`` (rounded down, at least 1, so a limit below ``workers`` lets
    up to ``workers`` through in all). Unchanged with one worker, Redis, or ``shared``."""
    if workers <= 1 or policy.gateway.redis_url is not None or policy.gateway.worker_limits != "split":
        return policy

    def share(tenant: TenantConfig) -> TenantConfig:
        changed = {name: max(1, getattr(tenant.limits, name) // workers) for name in _stateful(tenant.limits)}
        if not changed:
            return tenant
        return tenant.model_copy(update={"limits": tenant.limits.model_copy(update=changed)})

    return policy.model_copy(update={"tenants": [share(t) for t in policy.tenants]})
