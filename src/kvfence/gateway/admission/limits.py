"""Per-tenant limits: requests per minute, tokens per minute (both over a sliding window, 60 s unless
``gateway.limit_window_s`` says otherwise) and concurrent requests.

Tokens per minute: a request's prompt tokens are charged when it is admitted
(:meth:`LimitLease.admit_prompt`, counted with the same tokenizer as the length caps), and the most it
may generate (``max_tokens`` x choices, when the request says) is **reserved** at the same moment: a
reservation counts against the limit until the answer ends, when it is settled to the completion tokens
the answer really had (:meth:`LimitLease.add_completion`, also for a stream cut short) or dropped (the
request ended without an answer: :meth:`LimitLease.release`). So one request with a huge ``max_tokens``,
or many at once, cannot carry a tenant past its limit: a request whose prompt + reservation does not fit
what the window and the other requests in flight leave is refused with 429 (``tokens_per_minute_exceeded``,
naming the limit); one that could never fit is "request too large", without ``Retry-After``. A request
that names no ``max_tokens`` reserves what the backend may really generate for it: the chosen backend's
remaining context after the prompt (a stated default when unknown), capped to what the tenant's limit
leaves after the prompt (``usage.completion_reservation``), so many such requests in flight cannot
overrun the limit either.

Two stores with one interface: in process (one replica; pure logic with an injectable clock), or
Redis (several replicas share the counts; ``gateway.redis_url``). Each admission is one atomic Lua
script, so replicas never both take the last slot. If Redis cannot be reached the request is
refused (503): a configured limit is never silently dropped.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kvfence.gateway.errors import RateLimited
from kvfence.gateway.policy.tenants import GatewayTenant

__all__ = ["WINDOW_S", "LimitLease", "Limiter", "TenantLimiter"]

WINDOW_S = 60.0


class LimitLease(Protocol):
    """One admitted request's hold on its tenant's limits."""

    async def admit_prompt(self, tokens: int, reserve: int = 0, *, shrinkable: bool = False) -> None:
        """Charge the prompt's tokens and reserve ``reserve`` completion tokens, or raise
        :class:`RateLimited` (tokens per minute) when they do not fit. ``shrinkable``: the reservation
        is an estimate (no ``max_tokens`` named) and shrinks to what the window leaves; refused only
        when the prompt and one answer token do not fit."""
        ...

    async def add_completion(self, tokens: int) -> None:
        """Settle the reservation to the answer's real completion tokens (never refuses: the answer is out)."""
        ...

    async def release(self) -> None:
        """The request ended: free its concurrency slot and any unsettled reservation (idempotent)."""
        ...


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


def _asked(prompt: int, reserve: int) -> str:
    if not reserve:
        return f"{prompt}" if prompt else "0"
    return f"{prompt + reserve} ({prompt} prompt + {reserve} reserved for the answer)"


def _tokens_error(tenant: GatewayTenant, used: int, asked: int, retry_after_s: float | None, *,
                  reserve: int = 0, reserved: int = 0) -> RateLimited:
    limit = tenant.limits.tokens_per_minute
    if retry_after_s is None:
        # As OpenAI's "Request too large": waiting cannot help, so no Retry-After.
        what = "its prompt is" if not reserve else "its prompt + max_tokens x choices come to"
        return RateLimited(f"request too large for tenant {tenant.name!r}: {what} {_asked(asked, reserve)} tokens, "
                           f"over its whole limit of {limit} tokens per minute", code="tokens_per_minute_exceeded")
    held = f", {reserved} reserved by requests in flight" if reserved else ""
    return RateLimited(f"tenant {tenant.name!r} is over its limit of {limit} tokens per minute (used {used}{held}, "
                       f"requested {_asked(asked, reserve)})", retry_after_s=retry_after_s,
                       code="tokens_per_minute_exceeded")


def _tokens_retry_after(entries: deque[tuple[float, int]], need: int, now: float, window_s: float) -> float:
    """Seconds until the oldest entries have left the window and freed ``need`` tokens."""
    freed = 0
    for at, tokens in entries:
        freed += tokens
        if freed >= need:
            return max(0.0, at + window_s - now)
    return window_s  # not reached: need is never more than what the window holds


@dataclass
class _TenantState:
    starts: deque[float] = field(default_factory=deque)
    in_flight: int = 0
    tokens: deque[tuple[float, int]] = field(default_factory=deque)  # (when, how many), oldest first
    tokens_in_window: int = 0
    reserved: int = 0  # completion tokens reserved by requests in flight (they do not slide out)


class _LocalLease:
    def __init__(self, limiter: TenantLimiter, tenant: GatewayTenant) -> None:
        self._limiter = limiter
        self._tenant = tenant
        self._released = False
        self._reserved = 0

    async def admit_prompt(self, tokens: int, reserve: int = 0, *, shrinkable: bool = False) -> None:
        self.admit_now(tokens, reserve, shrinkable=shrinkable)

    def admit_now(self, tokens: int, reserve: int = 0, *, shrinkable: bool = False) -> None:
        held = self._limiter.admit_tokens(self._tenant, tokens, reserve=reserve, shrinkable=shrinkable)
        self._reserved += held

    async def add_completion(self, tokens: int) -> None:
        self.settle_now(tokens)

    def settle_now(self, tokens: int) -> None:
        reserved, self._reserved = self._reserved, 0
        self._limiter.unreserve(self._tenant, reserved)
        self._limiter.add_tokens(self._tenant, tokens)

    async def release(self) -> None:
        self.release_now()

    def release_now(self) -> None:
        if not self._released:  # idempotent
            self._released = True
            # ended without an answer to settle (refused, upstream error): the reservation is freed
            reserved, self._reserved = self._reserved, 0
            self._limiter.unreserve(self._tenant, reserved)
            self._limiter._release(self._tenant.name)


class TenantLimiter:
    """In-process limits for a single gateway replica."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, window_s: float = WINDOW_S) -> None:
        self._clock = clock
        self._window_s = window_s
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
        if limits.tokens_per_minute is not None:
            # A window already full (counting what requests in flight reserved) refuses before the
            # body is even read.
            used = self._tokens_used(state, now)
            if used + state.reserved >= limits.tokens_per_minute:
                need = used + state.reserved - limits.tokens_per_minute + 1
                retry = _tokens_retry_after(state.tokens, need, now, self._window_s)
                raise _tokens_error(tenant, used, 0, retry, reserved=state.reserved)
        if limits.requests_per_minute is not None:
            while state.starts and state.starts[0] <= now - self._window_s:
                state.starts.popleft()
            if len(state.starts) >= limits.requests_per_minute:
                raise _rate_error(tenant, state.starts[0] + self._window_s - now)
            state.starts.append(now)
        state.in_flight += 1
        return _LocalLease(self, tenant)

    def tokens_used(self, tenant: str) -> int:
        """Tokens counted in the current window (for tests and metrics)."""
        state = self._state.get(tenant)
        return self._tokens_used(state, self._clock()) if state else 0

    def tokens_reserved(self, tenant: str) -> int:
        """Completion tokens reserved by the tenant's requests in flight."""
        state = self._state.get(tenant)
        return state.reserved if state else 0

    def _tokens_used(self, state: _TenantState, now: float) -> int:
        horizon = now - self._window_s
        while state.tokens and state.tokens[0][0] <= horizon:
            state.tokens_in_window -= state.tokens.popleft()[1]
        return state.tokens_in_window

    def admit_tokens(self, tenant: GatewayTenant, tokens: int, *, reserve: int = 0, shrinkable: bool = False) -> int:
        """Charge a prompt's ``tokens`` and reserve ``reserve`` completion tokens, or raise
        :class:`RateLimited` if together they would not fit the window beside the other reservations.
        A ``shrinkable`` reservation takes what the window leaves, at least one token. Returns the
        tokens reserved."""
        limit = tenant.limits.tokens_per_minute
        tokens, reserve = max(tokens, 0), max(reserve, 0)
        if limit is None or tokens + reserve == 0:
            return 0
        state = self._state.setdefault(tenant.name, _TenantState())
        now = self._clock()
        used = self._tokens_used(state, now)
        if tokens + reserve > limit:
            raise _tokens_error(tenant, used, tokens, None, reserve=reserve)
        if shrinkable and reserve:
            reserve = max(1, min(reserve, limit - used - state.reserved - tokens))
        if used + state.reserved + tokens + reserve > limit:
            need = used + state.reserved + tokens + reserve - limit
            retry = _tokens_retry_after(state.tokens, need, now, self._window_s)
            raise _tokens_error(tenant, used, tokens, retry, reserve=reserve, reserved=state.reserved)
        if tokens:
            state.tokens.append((now, tokens))
            state.tokens_in_window += tokens
        state.reserved += reserve
        return reserve

    def unreserve(self, tenant: GatewayTenant, tokens: int) -> None:
        """Give back ``tokens`` of a reservation (its request settled or ended)."""
        state = self._state.get(tenant.name)
        if state is not None and tokens > 0:
            state.reserved = max(0, state.reserved - tokens)

    def add_tokens(self, tenant: GatewayTenant, tokens: int) -> None:
        """Charge an answer's ``tokens`` (never refuses)."""
        if tenant.limits.tokens_per_minute is None or tokens <= 0:
            return
        state = self._state.setdefault(tenant.name, _TenantState())
        state.tokens.append((self._clock(), tokens))
        state.tokens_in_window += tokens

    def _release(self, tenant: str) -> None:
        state = self._state.get(tenant)
        if state is not None and state.in_flight > 0:
            state.in_flight -= 1

    async def aclose(self) -> None:
        return None
