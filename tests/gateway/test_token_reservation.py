"""Tokens per minute with reservations: prompt + max_tokens x choices is held at admission and settled
to the real completion when the answer ends, so neither one huge ``max_tokens`` nor many requests at
once carry a tenant past its limit. In process, and through a real Redis server (several replicas)."""

from __future__ import annotations

import asyncio

import pytest

from kvfence.gateway.admission.caps import CapResult
from kvfence.gateway.admission.limits import TenantLimiter
from kvfence.gateway.admission.usage import DEFAULT_ANSWER_RESERVE, completion_reservation
from kvfence.gateway.errors import RateLimited
from kvfence.gateway.policy.schema import TenantLimits
from kvfence.gateway.policy.tenants import GatewayTenant


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
    ({"max_tokens": 0}, 0),  # scoring a prompt: nothing generated
    # no maximum named and the backend's context unknown: the stated default per sequence
    ({}, DEFAULT_ANSWER_RESERVE), ({"max_tokens": None}, DEFAULT_ANSWER_RESERVE),
    ({"max_tokens": True}, DEFAULT_ANSWER_RESERVE), ({"n": 2}, 2 * DEFAULT_ANSWER_RESERVE),
    ({"prompt": ["a", "b"]}, 2 * DEFAULT_ANSWER_RESERVE),
])
def test_what_a_request_reserves(body: dict[str, object], reserve: int) -> None:
    assert completion_reservation(body).tokens == reserve
    assert completion_reservation(body).shrinkable == ("max_tokens" not in body or body["max_tokens"] in (None, True))


def cap(prompt: int, context: int | None, total: int | None = None) -> CapResult:
    return CapResult(prompt, None, context, total_prompt_tokens=prompt if total is None else total)


@pytest.mark.parametrize(("body", "result", "tpm", "reserve"), [
    # no max_tokens: the chosen backend's remaining context after the prompt
    ({}, cap(100, 4096), None, 3996),
    ({"n": 3}, cap(100, 4096), None, 3 * 3996),
    ({"prompt": ["a", "bb"]}, cap(300, 1000, total=500), None, 1500),  # (1000-200) + (1000-300)
    ({}, cap(100, None), None, DEFAULT_ANSWER_RESERVE),
    ({}, cap(4096, 4096), None, 0),  # a prompt that fills the context leaves no room
    # capped to what the tenant's limit leaves after the prompt: never "too large" for an unnamed maximum
    ({}, cap(100, 128_000), 10_000, 9_900),
    ({}, cap(100, None), 1_000, 900),
    ({}, cap(2_000, 128_000), 1_000, 0),
    # a named maximum is the caller's word: reserved as asked, even past the limit (then "too large")
    ({"max_tokens": 5_000}, cap(100, 128_000), 1_000, 5_000),
])
def test_a_request_without_max_tokens_reserves_the_backends_remaining_context(
        body: dict[str, object], result: CapResult, tpm: int | None, reserve: int) -> None:
    assert completion_reservation(body, result, tpm).tokens == reserve


def unnamed(prompt: int, context: int | None, tpm: int) -> dict[str, object]:
    r = completion_reservation({}, cap(prompt, context), tpm)
    return {"reserve": r.tokens, "shrinkable": r.shrinkable}


def test_requests_without_max_tokens_cannot_overrun_the_limit_in_process() -> None:
    """Before, an unnamed max_tokens reserved nothing: any number of such requests were admitted at
    once, each free to generate up to the backend's context."""
    limiter = TenantLimiter()
    t = tenant(10_000)
    first = limiter.acquire_now(t)
    first.admit_now(100, **unnamed(100, 4096, 10_000))  # type: ignore[arg-type]  # 100 + 3996
    second = limiter.acquire_now(t)
    second.admit_now(100, **unnamed(100, 4096, 10_000))  # type: ignore[arg-type]
    assert limiter.tokens_reserved("t") == 2 * 3996
    third = limiter.acquire_now(t)
    third.admit_now(100, **unnamed(100, 4096, 10_000))  # type: ignore[arg-type]
    assert limiter.tokens_reserved("t") == 2 * 3996 + 1708  # shrunk to what the window leaves
    with pytest.raises(RateLimited, match=r"10000 tokens per minute \(used 300, 9700 reserved by requests in flight"):
        limiter.acquire_now(t)  # full: refused before the body is read
    for lease, tokens in ((first, 30), (second, 40), (third, 50)):
        lease.settle_now(tokens)
        lease.release_now()
    assert limiter.tokens_used("t") == 420 and limiter.tokens_reserved("t") == 0


def test_requests_without_max_tokens_run_one_after_another_without_waiting() -> None:
    """The implicit reservation (the backend's whole remaining context, capped to the limit) shrinks
    to what the window leaves, so a tenant below the context size is not held to one request per window."""
    limiter = TenantLimiter()
    t = tenant(1_000)
    for _ in range(5):
        lease = limiter.acquire_now(t)
        lease.admit_now(8, **unnamed(8, 128_000, 1_000))  # type: ignore[arg-type]
        assert limiter.tokens_reserved("t") > 0
        lease.settle_now(7)
        lease.release_now()
    assert limiter.tokens_used("t") == 75 and limiter.tokens_reserved("t") == 0
    running = limiter.acquire_now(t)
    running.admit_now(8, **unnamed(8, 128_000, 1_000))  # type: ignore[arg-type]  # holds the rest
    assert limiter.tokens_used("t") + limiter.tokens_reserved("t") == 1000
    with pytest.raises(RateLimited, match="1000 tokens per minute"):
        limiter.acquire_now(t)  # a second one at the same time waits for the first to settle
    running.release_now()
    # a named max_tokens is not shrunk: held whole or refused
    lease = limiter.acquire_now(t)
    lease.admit_now(8, 900)
    with pytest.raises(RateLimited, match=r"8 prompt \+ 100 reserved for the answer"):
        limiter.acquire_now(t).admit_now(8, 100)


@pytest.mark.redis
def test_redis_reservations_are_shared_atomic_and_settled(redis_url: str) -> None:
    from kvfence.gateway.admission.limits_redis import RedisTenantLimiter

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


@pytest.mark.redis
def test_redis_requests_without_max_tokens_reserve_the_remaining_context(redis_url: str) -> None:
    from kvfence.gateway.admission.limits_redis import RedisTenantLimiter

    async def run() -> None:
        replicas = [RedisTenantLimiter(redis_url, prefix="kvf-test-unnamed") for _ in range(2)]
        t = tenant(10_000, "unnamed")
        first = await replicas[0].acquire(t)
        await first.admit_prompt(100, **unnamed(100, 4096, 10_000))  # type: ignore[arg-type]
        second = await replicas[1].acquire(t)
        await second.admit_prompt(100, **unnamed(100, 4096, 10_000))  # type: ignore[arg-type]
        assert await replicas[0].tokens_reserved("unnamed") == 2 * 3996
        third = await replicas[0].acquire(t)
        await third.admit_prompt(100, **unnamed(100, 4096, 10_000))  # type: ignore[arg-type]
        assert await replicas[1].tokens_reserved("unnamed") == 2 * 3996 + 1708  # what the window left
        with pytest.raises(RateLimited, match=r"used 300, 9700 reserved"):
            await replicas[1].acquire(t)
        await third.release()  # ended without an answer: its reservation is freed
        fourth = await replicas[1].acquire(t)
        with pytest.raises(RateLimited, match=r"8 prompt \+ 1709 reserved for the answer"):
            await fourth.admit_prompt(8, 1709)  # a named max_tokens is held whole or refused
        await fourth.release()
        await first.add_completion(30)
        await first.release()
        await second.release()
        assert await replicas[1].tokens_reserved("unnamed") == 0
        assert await replicas[1].tokens_used("unnamed") == 330
        # a tenant whose limit is below the backend's context: runs one after another, not one per window
        small = tenant(1_000, "unnamed-small")
        for _ in range(3):
            lease = await replicas[0].acquire(small)
            await lease.admit_prompt(8, **unnamed(8, 128_000, 1_000))  # type: ignore[arg-type]
            assert await replicas[1].tokens_reserved("unnamed-small") > 0
            await lease.add_completion(7)
            await lease.release()
        assert await replicas[1].tokens_used("unnamed-small") == 45
        for r in replicas:
            await r.aclose()

    asyncio.run(run())
