"""Per-tenant limits shared by every gateway replica through Redis (``gateway.redis_url``).

The same limits as :class:`~kvfence.gateway.limits.TenantLimiter`, kept in Redis sorted sets scored by
the Redis server's clock (replicas' clocks never disagree about a window). Each admission is one Lua
script, run atomically by Redis, so two replicas never both take the last slot or the last tokens.
If Redis cannot be reached the request is refused (503): a configured limit is never silently dropped.

Keys per tenant (``PREFIX`` = ``kvfence:gw`` by default)::

    PREFIX:rpm:TENANT       request starts             member = request id, score = start (ms)
    PREFIX:inflight:TENANT  requests in flight         member = request id, score = lease expiry (ms)
    PREFIX:tpm:TENANT       tokens counted             member = "id:tokens", score = when (ms)

Summing the tokens of a window walks its entries (two per request): fine for thousands of requests per
tenant and minute, the regime these limits are for.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from kvfence.gateway.errors import LimitStoreUnavailable
from kvfence.gateway.limits import WINDOW_S, _concurrency_error, _rate_error, _tokens_error
from kvfence.gateway.tenants import GatewayTenant

__all__ = ["RedisTenantLimiter"]

# Sum of the tokens in a tpm set after dropping entries older than the window (as a Lua snippet).
_TOKENS_USED = """
local function tokens_used(key, now, window)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local used = 0
  for i = 1, #entries, 2 do
    used = used + tonumber(string.match(entries[i], ':(%d+)$'))
  end
  return used, entries
end
-- Milliseconds until the oldest entries have left the window and freed `need` tokens.
local function retry_ms(entries, need, now, window)
  local freed = 0
  for i = 1, #entries, 2 do
    freed = freed + tonumber(string.match(entries[i], ':(%d+)$'))
    if freed >= need then return math.max(1, tonumber(entries[i + 1]) + window - now) end
  end
  return window
end
"""

# KEYS: rate zset, in-flight zset, tpm zset. ARGV: now, member, rpm (0 = none), max_concurrent
# (0 = none), lease ttl, tpm (0 = none), window (ms).
# Returns {0, 0} admitted; {1, in_flight} over concurrency; {2, retry_ms} over rate; {3, retry_ms, used}
# when the token window is already full.
_ACQUIRE = _TOKENS_USED + """
local now = tonumber(ARGV[1])
local rpm = tonumber(ARGV[3])
local conc = tonumber(ARGV[4])
local tpm = tonumber(ARGV[6])
local window = tonumber(ARGV[7])
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  local n = redis.call('ZCARD', KEYS[2])
  if n >= conc then return {1, n} end
end
if tpm > 0 then
  local used, entries = tokens_used(KEYS[3], now, window)
  if used >= tpm then return {3, retry_ms(entries, used - tpm + 1, now, window), used} end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  if redis.call('ZCARD', KEYS[1]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {2, math.max(1, tonumber(oldest[2]) + window - now)}
  end
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('PEXPIRE', KEYS[1], window + 1000)
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[2])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[5]) + 1000)
end
return {0, 0}
"""

# KEYS: tpm zset. ARGV: now, member ("id:tokens"), tokens, tpm, window (ms), admit (1: refuse if over).
# Returns {0, used} charged; {1, used, retry_ms} refused.
_CHARGE = _TOKENS_USED + """
local now = tonumber(ARGV[1])
local tokens = tonumber(ARGV[3])
local tpm = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local used, entries = tokens_used(KEYS[1], now, window)
if ARGV[6] == '1' and used + tokens > tpm then
  return {1, used, retry_ms(entries, used + tokens - tpm, now, window)}
end
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('PEXPIRE', KEYS[1], window + 1000)
return {0, used + tokens}
"""


def _unreachable(exc: Exception) -> LimitStoreUnavailable:
    error = LimitStoreUnavailable("the shared rate-limit store (Redis) is unreachable; refusing rather than "
                                  "serving without the tenant's limits")
    error.__cause__ = exc
    return error


class _RedisLease:
    def __init__(self, limiter: RedisTenantLimiter, tenant: GatewayTenant, key: str | None, member: str) -> None:
        self._limiter, self._tenant, self._key, self._member = limiter, tenant, key, member
        self._released = False

    async def admit_prompt(self, tokens: int) -> None:
        await self._limiter._charge(self._tenant, tokens, self._member, admit=True)

    async def add_completion(self, tokens: int) -> None:
        # The answer is already out: if Redis fails now, the tokens go uncounted rather than fail it.
        with contextlib.suppress(LimitStoreUnavailable):
            await self._limiter._charge(self._tenant, tokens, self._member + "c", admit=False)

    async def release(self) -> None:
        if self._released or self._key is None:
            return
        self._released = True
        # If this fails the lease expires on its own (lease ttl); never fail a finished answer.
        with contextlib.suppress(Exception):
            await self._limiter._client.zrem(self._key, self._member)


class RedisTenantLimiter:
    """Limits shared by every gateway replica through Redis (time from the Redis server's clock)."""

    def __init__(self, url: str, *, lease_ttl_s: float = 900.0, prefix: str = "kvfence:gw",
                 window_s: float = WINDOW_S) -> None:
        import redis.asyncio as redis_asyncio

        self._client = redis_asyncio.from_url(url)
        self._acquire_script = self._client.register_script(_ACQUIRE)
        self._charge_script = self._client.register_script(_CHARGE)
        self._ttl_ms = int(lease_ttl_s * 1000)
        self._window_ms = int(window_s * 1000)
        self._prefix = prefix

    async def _now_ms(self) -> int:
        seconds, micros = await self._client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def acquire(self, tenant: GatewayTenant) -> _RedisLease:
        limits = tenant.limits
        member = uuid.uuid4().hex
        if limits.requests_per_minute is None and limits.max_concurrent is None and limits.tokens_per_minute is None:
            return _RedisLease(self, tenant, None, member)
        name = tenant.name
        keys = [f"{self._prefix}:rpm:{name}", f"{self._prefix}:inflight:{name}", f"{self._prefix}:tpm:{name}"]
        try:
            now_ms = await self._now_ms()
            result: Any = await self._acquire_script(keys=keys, args=[
                now_ms, member, limits.requests_per_minute or 0, limits.max_concurrent or 0, self._ttl_ms,
                limits.tokens_per_minute or 0, self._window_ms])
        except Exception as exc:
            raise _unreachable(exc) from exc
        kind = int(result[0])
        if kind == 1:
            raise _concurrency_error(tenant, int(result[1]))
        if kind == 2:
            raise _rate_error(tenant, int(result[1]) / 1000)
        if kind == 3:
            raise _tokens_error(tenant, int(result[2]), 0, int(result[1]) / 1000)
        return _RedisLease(self, tenant, keys[1] if limits.max_concurrent else None, member)

    async def _charge(self, tenant: GatewayTenant, tokens: int, member: str, *, admit: bool) -> None:
        limit = tenant.limits.tokens_per_minute
        if limit is None or tokens <= 0:
            return
        if admit and tokens > limit:
            raise _tokens_error(tenant, 0, tokens, None)
        try:
            now_ms = await self._now_ms()
            result: Any = await self._charge_script(
                keys=[f"{self._prefix}:tpm:{tenant.name}"],
                args=[now_ms, f"{member}:{tokens}", tokens, limit, self._window_ms, 1 if admit else 0])
        except Exception as exc:
            raise _unreachable(exc) from exc
        if int(result[0]) == 1:
            raise _tokens_error(tenant, int(result[1]), tokens, int(result[2]) / 1000)

    async def tokens_used(self, tenant: str) -> int:
        """Tokens counted in the current window (for tests)."""
        now_ms = await self._now_ms()
        entries: list[bytes] = await self._client.zrangebyscore(  # type: ignore[assignment]
            f"{self._prefix}:tpm:{tenant}", f"({now_ms - self._window_ms}", "+inf")
        return sum(int(member.rsplit(b":", 1)[1]) for member in entries)

    async def aclose(self) -> None:
        await self._client.aclose()
