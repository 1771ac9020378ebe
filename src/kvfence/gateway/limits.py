"""Per-tenant limits: requests per minute (sliding 60 s window) and concurrent requests.

Two stores with one interface: in process (one replica; pure logic with an injectable clock), or
Redis (several replicas share the counts; ``gateway.redis_url``). Each admission is one atomic Lua
script, so replicas never both take the last slot. If Redis cannot be reached the request is
refused (503): a configured limit is never silently dropped.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvfence.gateway.errors import LimitStoreUnavailable, RateLimited
from kvfence.gateway.tenants import GatewayTenant

__all__ = ["LimitLease", "Limiter", "RedisTenantLimiter", "TenantLimiter"]

WINDOW_S = 60.0


class LimitLease(Protocol):
    async def release(self) -> None: ...


class Limiter(Protocol):
    async def acquire(self, tenant: GatewayTenant) -> LimitLease: ...

    async def aclose(self) -> None: ...


def _concurrency_error(tenant: GatewayTenant, in_flight: int) -> RateLimited:
    return RateLimited(f"tenant {tenant.name!r} already has {in_flight} requests in flight "
                       f"(limit {tenant.limits.max_concurrent})", retry_after_s=1.0,
                       code="concurrency_limit_exceeded")


def _rate_error(tenant: GatewayTenant, retry_after_s: float) -> RateLimited:
    return RateLimited(f"tenant {tenant.name!r} is over its limit of {tenant.limits.requests_per_minute} "
                       "requests per minute", retry_after_s=retry_after_s)


@dataclass
class _TenantState:
    starts: deque[float] = field(default_factory=deque)
    in_flight: int = 0


class _LocalLease:
    def __init__(self, limiter: TenantLimiter, tenant: str) -> None:
        self._limiter = limiter
        self._tenant = tenant
        self._released = False

    async def release(self) -> None:
        self.release_now()

    def release_now(self) -> None:
        if not self._released:  # idempotent
            self._released = True
            self._limiter._release(self._tenant)


class TenantLimiter:
    """In-process limits for a single gateway replica."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._state: dict[str, _TenantState] = {}

    def in_flight(self, tenant: str) -> int:
        state = self._state.get(tenant)
        return state.in_flight if state else 0

    async def acquire(self, tenant: GatewayTenant) -> _LocalLease:
        return self.acquire_now(tenant)

    def acquire_now(self, tenant: GatewayTenant) -> _LocalLease:
        """Count one request start, or raise :class:`RateLimited` with a ``Retry-After``."""
        state = self._state.setdefault(tenant.name, _TenantState())
        limits = tenant.limits
        now = self._clock()
        if limits.max_concurrent is not None and state.in_flight >= limits.max_concurrent:
            raise _concurrency_error(tenant, state.in_flight)
        if limits.requests_per_minute is not None:
            while state.starts and state.starts[0] <= now - WINDOW_S:
                state.starts.popleft()
            if len(state.starts) >= limits.requests_per_minute:
                raise _rate_error(tenant, state.starts[0] + WINDOW_S - now)
            state.starts.append(now)
        state.in_flight += 1
        return _LocalLease(self, tenant.name)

    def _release(self, tenant: str) -> None:
        state = self._state.get(tenant)
        if state is not None and state.in_flight > 0:
            state.in_flight -= 1

    async def aclose(self) -> None:
        return None


# KEYS: rate zset, in-flight zset. ARGV: now, member, rpm (0 = none), max_concurrent (0 = none), lease ttl.
# Returns {0, 0} admitted; {1, in_flight} over concurrency; {2, retry_after_ms} over rate.
_ACQUIRE = """
local now = tonumber(ARGV[1])
local rpm = tonumber(ARGV[3])
local conc = tonumber(ARGV[4])
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  local n = redis.call('ZCARD', KEYS[2])
  if n >= conc then return {1, n} end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[1]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {2, math.max(1, tonumber(oldest[2]) + 60000 - now)}
  end
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('PEXPIRE', KEYS[1], 61000)
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[2])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[5]) + 1000)
end
return {0, 0}
"""


class _RedisLease:
    def __init__(self, client: Any, key: str | None, member: str) -> None:
        self._client, self._key, self._member = client, key, member
        self._released = False

    async def release(self) -> None:
        if self._released or self._key is None:
            return
        self._released = True
        # If this fails the lease expires on its own (lease ttl); never fail a finished answer.
        with contextlib.suppress(Exception):
            await self._client.zrem(self._key, self._member)


class RedisTenantLimiter:
    """Limits shared by every gateway replica through Redis (time from the Redis server's clock)."""

    def __init__(self, url: str, *, lease_ttl_s: float = 900.0, prefix: str = "kvfence:gw") -> None:
        import redis.asyncio as redis_asyncio

        self._client = redis_asyncio.from_url(url)
        self._script = self._client.register_script(_ACQUIRE)
        self._ttl_ms = int(lease_ttl_s * 1000)
        self._prefix = prefix

    async def acquire(self, tenant: GatewayTenant) -> _RedisLease:
        limits = tenant.limits
        if limits.requests_per_minute is None and limits.max_concurrent is None:
            return _RedisLease(self._client, None, "")
        member = uuid.uuid4().hex
        rate_key = f"{self._prefix}:rpm:{tenant.name}"
        flight_key = f"{self._prefix}:inflight:{tenant.name}"
        try:
            seconds, micros = await self._client.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            kind, value = await self._script(keys=[rate_key, flight_key], args=[
                now_ms, member, limits.requests_per_minute or 0, limits.max_concurrent or 0, self._ttl_ms])
        except Exception as exc:
            raise LimitStoreUnavailable("the shared rate-limit store (Redis) is unreachable; refusing rather "
                                        "than serving without the tenant's limits") from exc
        if int(kind) == 1:
            raise _concurrency_error(tenant, int(value))
        if int(kind) == 2:
            raise _rate_error(tenant, int(value) / 1000)
        return _RedisLease(self._client, flight_key if limits.max_concurrent else None, member)

    async def aclose(self) -> None:
        await self._client.aclose()
