"""Tokens per minute with reservations: prompt + max_tokens x choices is held at admission and settled
to the real completion when the answer ends, so neither one huge ``max_tokens`` nor many requests at
once carry a tenant past its limit. In process, and through a real Redis server (several replicas)."""

from __future__ import annotations

import asyncio

import pytest

from kvfence.gateway.errors import RateLimited
from kvfence.gateway.limits import TenantLimiter
from kvfence.gateway.policy import TenantLimits
from kvfence.gateway.tenants import GatewayTenant
from kvfence.gateway.usage import completion_reservation


def tenant(tpm: int, name: str = "t") -> GatewayTenant:
    return GatewayTenant(name, "o", "w", "public", TenantLimits(tokens_per_minute=tpm))


@pytest.mark.parametrize(("body", "reserve"), [
    ({"max_tokens": 100}, 100),
    ({"max_completion_tokens": 50, "max_tokens": 100}, 50),
    ({"max_tokens": 100, "n": 3}, 300),
    ({"max_tokens": 10, "n": 2, "best_of": 4}, 40),  # every best_of sequence is generated
    ({"max_tokens": 10, "prompt": ["a", "b", "c"]}, 30),  # a completions batch: each prompt gets its choices
    ({"max_tokens": 10, "prompt": [1, 2, 3]}, 10),  # one prompt given as token ids
    ({"max_tokens": 10, "prompt": [[1, 2], [3]], "n": 2}, 40),
    ({}, 0), ({"max_tokens": None}, 0), ({"max_tokens": 0}, 0), ({"max_tokens": True}, 0),
])
def test_what_a_request_reserves(body: dict[str, object], reserve: int) -> None:
    assert completion_reservation(body) == reserve


def test_a_huge_max_tokens_is_refused_up_front_as_too_large() -> None:
    limiter = TenantLimiter()
    t = tenant(1000)
    lease = limiter.acquire_now(t)
    with pytest.raises(RateLimited, match=r"request too large.*10 prompt \+ 5000 reserved.*1000 tokens per minute") as err:
        lease.admit_now(10, 5000)
    assert "Retry-After" not in err.value.headers()
    lease.release_now()
    assert limiter.tokens_used("t") == 0 and limiter.tokens_reserved("t") == 0


def test_reservation_is_settled_to_the_real_usage() -> None:
    now = [0.0]
    limiter = TenantLimiter(clock=lambda: now[0])
    t = tenant(1000)
    lease = limiter.acquire_now(t)
    lease.admit_now(100, 500)
    assert limiter.tokens_used("t") == 100 and limiter.tokens_reserved("t") == 500
    other = limiter.acquire_now(t)
    with pytest.raises(RateLimited, match=r"1000 tokens per minute \(used 100, 500 reserved by requests in flight"):
        other.admit_now(100, 350)  # 100 + 500 + 450 > 1000
    other.admit_now(100, 300)  # fits exactly: 100 + 500 + 100 + 300
    with pytest.raises(RateLimited, match=r"used 200, 800 reserved"):
        limiter.acquire_now(t)  # the window with reservations is full: refused before the body is read
    now[0] = 1.0
    lease.settle_now(42)  # the answer had 42 tokens: 458 go back
    lease.release_now()
    assert limiter.tokens_used("t") == 242 and limiter.tokens_reserved("t") == 300
    other.release_now()  # ended without an answer (e.g. upstream error): its reservation is freed
    assert limiter.tokens_reserved("t") == 0 and limiter.tokens_used("t") == 242
    other.release_now()  # idempotent
    assert limiter.tokens_reserved("t") == 0


def test_reservations_do_not_slide_out_of_the_window() -> None:
    now = [0.0]
    limiter = TenantLimiter(clock=lambda: now[0], window_s=10.0)
    t = tenant(100)
    long_answer = limiter.acquire_now(t)
    long_answer.admit_now(10, 80)
    now[0] = 30.0  # the prompt has left the window, the answer is still running
    assert limiter.tokens_used("t") == 0
    with pytest.raises(RateLimited):
        limiter.acquire_now(t).admit_now(10, 20)  # 80 still reserved
    long_answer.settle_now(80)
    long_answer.release_now()
    assert limiter.tokens_used("t") == 80 and limiter.tokens_reserved("t") == 0


def test_concurrent_requests_never_reserve_past_the_limit() -> None:
    limiter = TenantLimiter()
    t = tenant(1000)
    admitted: list[int] = []
    refused: list[str] = []
    peak = [0]

    async def one(i: int) -> None:
        try:
            lease = await limiter.acquire(t)
        except RateLimited as exc:
            refused.append(exc.message)
            return
        try:
            await asyncio.sleep(0.001 * (i % 3))
            await lease.admit_prompt(20, 180)  # 200 each: at most five at once
            admitted.append(i)
            peak[0] = max(peak[0], limiter.tokens_used("t") + limiter.tokens_reserved("t"))
            await asyncio.sleep(0.01)
            await lease.add_completion(5)
        except RateLimited as exc:
            refused.append(exc.message)
        finally:
            await lease.release()

    async def run() -> None:
        await asyncio.gather(*(one(i) for i in range(20)))

    asyncio.run(run())
    assert peak[0] <= 1000
    assert 5 <= len(admitted) < 20 and len(admitted) + len(refused) == 20
    assert all("1000 tokens per minute" in m for m in refused)
    assert limiter.tokens_reserved("t") == 0
    assert limiter.tokens_used("t") == 25 * len(admitted)


@pytest.mark.redis
def test_redis_reservations_are_shared_atomic_and_settled(redis_url: str) -> None:
    from kvfence.gateway.limits_redis import RedisTenantLimiter

    async def run() -> None:
        replicas = [RedisTenantLimiter(redis_url, prefix="kvf-test-reserve") for _ in range(3)]
        t = tenant(1000, "res")
        with pytest.raises(RateLimited, match="request too large"):
            await (await replicas[0].acquire(t)).admit_prompt(10, 5000)
        admitted: list[int] = []
        refused: list[str] = []
        peak = [0]

        async def one(i: int) -> None:
            limiter = replicas[i % 3]
            try:
                lease = await limiter.acquire(t)
            except RateLimited as exc:
                refused.append(exc.message)
                return
            try:
                await lease.admit_prompt(20, 180)
                admitted.append(i)
                used = await limiter.tokens_used("res") + await limiter.tokens_reserved("res")
                peak[0] = max(peak[0], used)
                await asyncio.sleep(0.05)
                await lease.add_completion(5)
            except RateLimited as exc:
                refused.append(exc.message)
            finally:
                await lease.release()

        await asyncio.gather(*(one(i) for i in range(24)))
        assert peak[0] <= 1000
        assert 5 <= len(admitted) < 24 and len(admitted) + len(refused) == 24
        assert all("1000 tokens per minute" in m for m in refused)
        assert await replicas[1].tokens_reserved("res") == 0
        assert await replicas[2].tokens_used("res") == 25 * len(admitted)
        # a request that ends without an answer frees its reservation
        lease = await replicas[0].acquire(tenant(10**6, "res2"))
        await lease.admit_prompt(10, 100)
        assert await replicas[1].tokens_reserved("res2") == 100
        await lease.release()
        assert await replicas[1].tokens_reserved("res2") == 0
        assert await replicas[1].tokens_used("res2") == 10
        for r in replicas:
            await r.aclose()

    asyncio.run(run())
