"""Per-tenant limits: requests per minute, tokens per minute (both over a sliding window, 60 s unless
``gateway.limit_window_s`` says otherwise) and concurrent requests.

Tokens per minute counts what LiteLLM users expect it to: a request's prompt tokens when it is admitted
(:meth:`LimitLease.admit_prompt`, counted with the same tokenizer as the length caps) plus its
completion tokens once the answer says how many there were (:meth:`LimitLease.add_completion`). A
request is refused when the window already holds the limit (before its body is read), or when its
prompt would push the window over; completion tokens are added after the fact, so concurrent answers
can carry a tenant past its limit for one window, never longer.

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
from kvfence.gateway.tenants import GatewayTenant

__all__ = ["WINDOW_S", "LimitLease", "Limiter", "TenantLimiter"]

WINDOW_S = 60.0


class LimitLease(Protocol):
    """One admitted request's hold on its tenant's limits."""

    async def admit_prompt(self, tokens: int) -> None:
        """Charge the prompt's tokens, or raise :class:`RateLimited` (tokens per minute)."""
        ...

    async def add_completion(self, tokens: int) -> None:
        """Charge the answer's tokens (never refuses: the answer is already out)."""
        ...

    async def release(self) -> None:
        """The request ended: free its concurrency slot (idempotent)."""
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


def _tokens_error(tenant: GatewayTenant, used: int, asked: int, retry_after_s: float | None) -> RateLimited:
    limit = tenant.limits.tokens_per_minute
    if retry_after_s is None:
        # As OpenAI's "Request too large": waiting cannot help, so no Retry-After.
        return RateLimited(f"request too large for tenant {tenant.name!r}: its prompt is {asked} tokens, over "
                           f"its whole limit of {limit} tokens per minute", code="tokens_per_minute_exceeded")
    return RateLimited(f"tenant {tenant.name!r} is over its limit of {limit} tokens per minute (used {used}, "
                       f"requested {asked})", retry_after_s=retry_after_s, code="tokens_per_minute_exceeded")


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


class _LocalLease:
    def __init__(self, limiter: TenantLimiter, tenant: GatewayTenant) -> None:
        self._limiter = limiter
        self._tenant = tenant
        self._released = False

    async def admit_prompt(self, tokens: int) -> None:
        self._limiter.admit_tokens(self._tenant, tokens)

    async def add_completion(self, tokens: int) -> None:
        self._limiter.add_tokens(self._tenant, tokens)

    async def release(self) -> None:
        self.release_now()

    def release_now(self) -> None:
        if not self._released:  # idempotent
            self._released = True
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
            # A window already full refuses before the body is even read.
            used = self._tokens_used(state, now)
            if used >= limits.tokens_per_minute:
                retry = _tokens_retry_after(state.tokens, used - limits.tokens_per_minute + 1, now, self._window_s)
                raise _tokens_error(tenant, used, 0, retry)
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

    def _tokens_used(self, state: _TenantState, now: float) -> int:
        horizon = now - self._window_s
        while state.tokens and state.tokens[0][0] <= horizon:
            state.tokens_in_window -= state.tokens.popleft()[1]
        return state.tokens_in_window

    def admit_tokens(self, tenant: GatewayTenant, tokens: int) -> None:
        """Charge a prompt's ``tokens``, or raise :class:`RateLimited` if they would not fit the window."""
        limit = tenant.limits.tokens_per_minute
        if limit is None or tokens <= 0:
            return
        state = self._state.setdefault(tenant.name, _TenantState())
        now = self._clock()
        used = self._tokens_used(state, now)
        if tokens > limit:
            raise _tokens_error(tenant, used, tokens, None)
        if used + tokens > limit:
            retry = _tokens_retry_after(state.tokens, used + tokens - limit, now, self._window_s)
            raise _tokens_error(tenant, used, tokens, retry)
        state.tokens.append((now, tokens))
        state.tokens_in_window += tokens

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
