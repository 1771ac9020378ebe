"""Rate and concurrency limits shared through a real Redis server (several gateway replicas)."""

from __future__ import annotations

import asyncio

import pytest

from kvfence.gateway.admission.limits_redis import RedisTenantLimiter
from kvfence.gateway.errors import GatewayError, RateLimited
from kvfence.gateway.policy.schema import TenantLimits
from kvfence.gateway.policy.tenants import GatewayTenant

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


def test_two_replicas_share_a_token_window(redis_url: str) -> None:
    async def run() -> None:
        one = RedisTenantLimiter(redis_url, prefix="kvf-test-tpm", window_s=2.0)
        two = RedisTenantLimiter(redis_url, prefix="kvf-test-tpm", window_s=2.0)
        t = GatewayTenant("t2", "o", "w", "public", TenantLimits(tokens_per_minute=100))
        other = GatewayTenant("t3", "o", "w", "public", TenantLimits(tokens_per_minute=100))
        a = await one.acquire(t)
        await a.admit_prompt(60)
        b = await two.acquire(t)
        with pytest.raises(RateLimited, match="100 tokens per minute") as err:
            await b.admit_prompt(50)  # 60 (counted by the other replica) + 50 > 100
        assert err.value.code == "tokens_per_minute_exceeded"
        assert 1 <= int(err.value.headers()["Retry-After"]) <= 2
        await b.admit_prompt(40)
        await a.add_completion(30)  # charged even past the limit: the answer is already out
        assert await one.tokens_used("t2") == 130
        with pytest.raises(RateLimited, match="used 130"):
            await two.acquire(t)  # a full window refuses at once
        with pytest.raises(RateLimited, match="request too large") as big:
            await (await one.acquire(other)).admit_prompt(101)
        assert "Retry-After" not in big.value.headers()
        await (await two.acquire(other)).admit_prompt(100)  # another tenant has its own window
        await asyncio.sleep(2.1)  # the window slides
        assert await two.tokens_used("t2") == 0
        await (await one.acquire(t)).admit_prompt(100)
        await one.aclose()
        await two.aclose()

    asyncio.run(run())
