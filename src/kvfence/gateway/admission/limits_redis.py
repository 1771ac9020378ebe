"""Per-tenant limits shared by every gateway replica through Redis (``gateway.redis_url``).

The same limits as :class:`~kvfence.gateway.admission.limits.TenantLimiter`, kept in Redis sorted sets scored by
the Redis server's clock (replicas' clocks never disagree about a window). Each admission is one Lua
script, run atomically by Redis, so two replicas never both take the last slot or the last tokens.
If Redis cannot be reached the request is refused (503): a configured limit is never silently dropped.

Keys per tenant (``PREFIX`` = ``kvfence:gw`` by default)::

    PREFIX:rpm:TENANT       request starts             member = request id, score = start (ms)
    PREFIX:inflight:TENANT  requests in flight         member = request id, score = lease expiry (ms)
    PREFIX:tpm:TENANT       tokens counted             member = "id:tokens", score = when (ms)
    PREFIX:tpmres:TENANT    completion tokens reserved member = "id:tokens", score = reservation expiry (ms)
                            by requests in flight      (settled or freed when the request ends; a crashed
                                                       replica's reservations expire with the lease ttl)

Summing the tokens of a window walks its entries (two per request): fine for thousands of requests per
tenant and minute, the regime these limits are for.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from kvfence.gateway.admission.limits import WINDOW_S, _concurrency_error, _rate_error, _tokens_error
from kvfence.gateway.errors import LimitStoreUnavailable
from kvfence.gateway.policy.tenants import GatewayTenant

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
-- Sum of the reservations still held (expired ones, of crashed replicas, are dropped first).
local function tokens_reserved(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local held = redis.call('ZRANGE', key, 0, -1)
  local total = 0
  for i = 1, #held do
    total = total + tonumber(string.match(held[i], ':(%d+)$'))
  end
  return total
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

# KEYS: rate zset, in-flight zset, tpm zset, tpm reservations zset. ARGV: now, member, rpm (0 = none),
# max_concurrent (0 = none), lease ttl, tpm (0 = none), window (ms).
# Returns {0, 0} admitted; {1, in_flight} over concurrency; {2, retry_ms} over rate; {3, retry_ms, used,
# reserved} when the token window (with the reservations of requests in flight) is already full.
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
  local reserved = tokens_reserved(KEYS[4], now)
  if used + reserved >= tpm then
    return {3, retry_ms(entries, used + reserved - tpm + 1, now, window), used, reserved}
  end
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

# KEYS: tpm zset, tpm reservations zset. ARGV: now, member ("id:tokens") of the prompt, tokens, tpm,
# window (ms), reservation member prefix (the tokens are appended), reserve, reservation ttl (ms),
# shrinkable (1: the reservation takes what the window leaves, at least one token). Prompt + reservation
# are admitted together or not at all. Returns {0, reservation member or ""} admitted; {1, used,
# retry_ms, reserved} refused.
_ADMIT = _TOKENS_USED + """
local now = tonumber(ARGV[1])
local tokens = tonumber(ARGV[3])
local tpm = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local reserve = tonumber(ARGV[7])
local used, entries = tokens_used(KEYS[1], now, window)
local reserved = tokens_reserved(KEYS[2], now)
if ARGV[9] == '1' and reserve > 0 then
  reserve = math.max(1, math.min(reserve, tpm - used - reserved - tokens))
end
if used + reserved + tokens + reserve > tpm then
  return {1, used, retry_ms(entries, used + reserved + tokens + reserve - tpm, now, window), reserved}
end
if tokens > 0 then
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('PEXPIRE', KEYS[1], window + 1000)
end
local member = ''
if reserve > 0 then
  member = ARGV[6] .. reserve
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[8]), member)
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[8]) + 1000)
end
return {0, member}
"""

# KEYS: tpm zset, tpm reservations zset. ARGV: now, member ("id:tokens", "" for none) of the completion,
# window (ms), reservation member to drop ("" for none). Settles in one step: the reservation goes, the
# real completion tokens enter the window.
_SETTLE = """
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[2], ARGV[4]) end
if ARGV[2] ~= '' then
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 1000)
end
return {0}
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
        self._reservation: str | None = None  # "id:tokens" in the reservations set, until settled

    async def admit_prompt(self, tokens: int, reserve: int = 0, *, shrinkable: bool = False) -> None:
        self._reservation = await self._limiter._admit(self._tenant, tokens, reserve, self._member,
                                                       shrinkable=shrinkable)

    async def add_completion(self, tokens: int) -> None:
        reservation, self._reservation = self._reservation, None
        # The answer is already out: if Redis fails now, the tokens go uncounted rather than fail it
        # (an unsettled reservation expires with the lease ttl).
        with contextlib.suppress(LimitStoreUnavailable):
            await self._limiter._settle(self._tenant, tokens, self._member + "c", reservation)

    async def release(self) -> None:
        if self._released:
            return
        self._released = True
        reservation, self._reservation = self._reservation, None
        if reservation is not None:  # ended without an answer to settle: free what it reserved
            with contextlib.suppress(Exception):
                await self._limiter._settle(self._tenant, 0, "", reservation)
        if self._key is None:
            return
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
        self._admit_script = self._client.register_script(_ADMIT)
        self._settle_script = self._client.register_script(_SETTLE)
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
        keys = [f"{self._prefix}:rpm:{name}", f"{self._prefix}:inflight:{name}", f"{self._prefix}:tpm:{name}",
                f"{self._prefix}:tpmres:{name}"]
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
            raise _tokens_error(tenant, int(result[2]), 0, int(result[1]) / 1000, reserved=int(result[3]))
        return _RedisLease(self, tenant, keys[1] if limits.max_concurrent else None, member)

    def _token_keys(self, tenant: GatewayTenant) -> list[str]:
        return [f"{self._prefix}:tpm:{tenant.name}", f"{self._prefix}:tpmres:{tenant.name}"]

    async def _admit(self, tenant: GatewayTenant, tokens: int, reserve: int, member: str, *,
                     shrinkable: bool = False) -> str | None:
        """Charge the prompt and reserve the completion atomically; the reservation's member, if any
        (a ``shrinkable`` reservation takes what the window leaves: see ``limits.LimitLease``)."""
        limit = tenant.limits.tokens_per_minute
        tokens, reserve = max(tokens, 0), max(reserve, 0)
        if limit is None or tokens + reserve == 0:
            return None
        if tokens + reserve > limit:
            raise _tokens_error(tenant, 0, tokens, None, reserve=reserve)
        try:
            now_ms = await self._now_ms()
            result: Any = await self._admit_script(keys=self._token_keys(tenant), args=[
                now_ms, f"{member}:{tokens}", tokens, limit, self._window_ms, f"{member}r:", reserve, self._ttl_ms,
                1 if shrinkable else 0])
        except Exception as exc:
            raise _unreachable(exc) from exc
        if int(result[0]) == 1:
            raise _tokens_error(tenant, int(result[1]), tokens, int(result[2]) / 1000, reserve=reserve,
                                reserved=int(result[3]))
        reservation = result[1].decode() if isinstance(result[1], bytes) else str(result[1])
        return reservation or None

    async def _settle(self, tenant: GatewayTenant, tokens: int, member: str, reservation: str | None) -> None:
        """Drop ``reservation`` and charge ``tokens`` completion tokens, in one step."""
        if tenant.limits.tokens_per_minute is None or (tokens <= 0 and reservation is None):
            return
        try:
            now_ms = await self._now_ms()
            await self._settle_script(keys=self._token_keys(tenant), args=[
                now_ms, f"{member}:{tokens}" if tokens > 0 else "", self._window_ms, reservation or ""])
        except Exception as exc:
            raise _unreachable(exc) from exc

    async def tokens_reserved(self, tenant: str) -> int:
        """Completion tokens reserved by the tenant's requests in flight (for tests)."""
        now_ms = await self._now_ms()
        held: list[bytes] = await self._client.zrangebyscore(  # type: ignore[assignment]
            f"{self._prefix}:tpmres:{tenant}", f"({now_ms}", "+inf")
        return sum(int(member.rsplit(b":", 1)[1]) for member in held)

    async def tokens_used(self, tenant: str) -> int:
        """Tokens counted in the current window (for tests)."""
        now_ms = await self._now_ms()
        entries: list[bytes] = await self._client.zrangebyscore(  # type: ignore[assignment]
            f"{self._prefix}:tpm:{tenant}", f"({now_ms - self._window_ms}", "+inf")
        return sum(int(member.rsplit(b":", 1)[1]) for member in entries)

    async def aclose(self) -> None:
        await self._client.aclose()
