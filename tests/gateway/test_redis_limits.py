"""Rate and concurrency limits shared through a real Redis server (several gateway replicas)."""

from __future__ import annotations

import asyncio

import pytest

from kvfence.gateway.errors import GatewayError, RateLimited
from kvfence.gateway.limits import RedisTenantLimiter
from kvfence.gateway.policy import TenantLimits
from kvfence.gateway.tenants import GatewayTenant

pytestmark = pytest.mark.redis


def test_two_replicas_share_the_limits(redis_url: str) -> None:
    async def run() -> None:
        one = RedisTenantLimiter(redis_url, prefix="kvf-test-share")
        two = RedisTenantLimiter(redis_url, prefix="kvf-test-share")
        t = GatewayTenant("t1", "o", "w", "public", TenantLimits(requests_per_minute=3, max_concurrent=2))
        a = await one.acquire(t)
        b = await two.acquire(t)
        with pytest.raises(RateLimited, match="in flight"):
            await one.acquire(t)  # two requests in flight across both replicas
        await a.release()
        await a.release()  # idempotent
        c = await two.acquire(t)  # third request of the minute
        await b.release()
        await c.release()
        with pytest.raises(RateLimited, match="per minute") as err:
            await one.acquire(t)
        assert 1 <= int(err.value.headers()["Retry-After"]) <= 60
        await one.aclose()
        await two.aclose()

    asyncio.run(run())


def test_unreachable_redis_fails_closed() -> None:
    async def run() -> None:
        limiter = RedisTenantLimiter("redis://127.0.0.1:1/0")
        t = GatewayTenant("t", "o", "w", "public", TenantLimits(requests_per_minute=3))
        with pytest.raises(GatewayError, match="unreachable") as err:
            await limiter.acquire(t)
        assert err.value.status_code == 503 and err.value.code == "rate_limit_store_unavailable"
        await limiter.aclose()

    asyncio.run(run())
