"""Per-tenant limits: requests per minute (sliding 60 s window) and concurrent requests.

In-process state, one gateway replica. Pure logic with an injectable clock so it is tested on
plain data.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kvfence.gateway.errors import RateLimited
from kvfence.gateway.tenants import GatewayTenant

__all__ = ["LimitLease", "TenantLimiter"]

WINDOW_S = 60.0


@dataclass
class _TenantState:
    starts: deque[float] = field(default_factory=deque)
    in_flight: int = 0


class LimitLease:
    """Held while a request runs; ``release()`` exactly once (idempotent)."""

    def __init__(self, limiter: TenantLimiter, tenant: str) -> None:
        self._limiter = limiter
        self._tenant = tenant
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._limiter._release(self._tenant)


class TenantLimiter:
    """Admits or refuses (429) a tenant's request against its configured limits."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._state: dict[str, _TenantState] = {}

    def in_flight(self, tenant: str) -> int:
        state = self._state.get(tenant)
        return state.in_flight if state else 0

    def acquire(self, tenant: GatewayTenant) -> LimitLease:
        """Count one request start, or raise :class:`RateLimited` with a ``Retry-After``."""
        state = self._state.setdefault(tenant.name, _TenantState())
        limits = tenant.limits
        now = self._clock()
        if limits.max_concurrent is not None and state.in_flight >= limits.max_concurrent:
            raise RateLimited(
                f"tenant {tenant.name!r} already has {state.in_flight} requests in flight "
                f"(limit {limits.max_concurrent})",
                retry_after_s=1.0, code="concurrency_limit_exceeded",
            )
        if limits.requests_per_minute is not None:
            while state.starts and state.starts[0] <= now - WINDOW_S:
                state.starts.popleft()
            if len(state.starts) >= limits.requests_per_minute:
                retry = state.starts[0] + WINDOW_S - now
                raise RateLimited(
                    f"tenant {tenant.name!r} is over its limit of {limits.requests_per_minute} "
                    "requests per minute",
                    retry_after_s=retry,
                )
            state.starts.append(now)
        state.in_flight += 1
        return LimitLease(self, tenant.name)

    def _release(self, tenant: str) -> None:
        state = self._state.get(tenant)
        if state is not None and state.in_flight > 0:
            state.in_flight -= 1
