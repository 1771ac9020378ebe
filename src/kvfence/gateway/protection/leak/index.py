"""Where fingerprints of recent prompts live: in this process, or in Redis for several replicas.

Both indexes answer one question: which tenants sent a prompt containing this n-gram within the
sliding window (default 15 minutes)? Entries older than the window are forgotten. Neither holds
prompt text: only 64-bit keyed fingerprints (see :mod:`.fingerprint`) and tenant names.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

__all__ = ["FingerprintIndex", "InMemoryIndex", "RedisIndex"]


class FingerprintIndex(Protocol):
    window_s: float

    def add(self, tenant: str, fingerprints: Iterable[int], now: float | None = None) -> None:
        """Record that ``tenant`` just sent text with these fingerprints."""
        ...

    def owners(self, fingerprints: Sequence[int], now: float | None = None) -> list[frozenset[str]]:
        """For each fingerprint, the tenants that sent it within the window."""
        ...

    def close(self) -> None: ...


class InMemoryIndex:
    """A dict of fingerprint -> {tenant: last seen}, expired in insertion order; thread-safe."""

    def __init__(self, window_s: float = 900.0, max_entries: int = 2_000_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._max_entries = max_entries
        self._clock = clock
        self._seen: dict[int, dict[str, float]] = {}
        self._log: deque[tuple[float, int, str]] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        log, seen = self._log, self._seen
        while log and (log[0][0] < horizon or len(log) > self._max_entries):
            stamp, fingerprint, tenant = log.popleft()
            tenants = seen.get(fingerprint)
            # Only forget the entry if no later sighting refreshed it.
            if tenants is not None and tenants.get(tenant) == stamp:
                del tenants[tenant]
                if not tenants:
                    del seen[fingerprint]

    def add(self, tenant: str, fingerprints: Iterable[int], now: float | None = None) -> None:
        stamp = self._clock() if now is None else now
        with self._lock:
            for fingerprint in set(fingerprints):
                self._seen.setdefault(fingerprint, {})[tenant] = stamp
                self._log.append((stamp, fingerprint, tenant))
            self._expire(stamp)

    def owners(self, fingerprints: Sequence[int], now: float | None = None) -> list[frozenset[str]]:
        stamp = self._clock() if now is None else now
        horizon = stamp - self.window_s
        with self._lock:
            result = []
            for fingerprint in fingerprints:
                tenants = self._seen.get(fingerprint)
                result.append(frozenset(t for t, seen in tenants.items() if seen >= horizon)
                              if tenants else frozenset())
            return result

    def close(self) -> None:
        return None


class RedisIndex:
    """One sorted set per fingerprint (member: tenant, score: time), expiring with the window.

    Used by every gateway replica alike, so a leak of a prompt sent through replica 1 is caught in
    an answer passing through replica 2. Times are wall-clock seconds, shared by the replicas.
    """

    def __init__(self, url: str, *, window_s: float = 900.0, prefix: str = "kvfence:fp:",
                 client: Any = None, clock: Callable[[], float] = time.time) -> None:
        import redis

        self.window_s = window_s
        self._prefix = prefix
        self._clock = clock
        self._redis = client if client is not None else redis.Redis.from_url(
            url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self._ttl = max(1, int(window_s) + 1)

    def _key(self, fingerprint: int) -> str:
        return f"{self._prefix}{fingerprint:016x}"

    def ping(self) -> bool:
        return bool(self._redis.ping())

    def add(self, tenant: str, fingerprints: Iterable[int], now: float | None = None) -> None:
        stamp = self._clock() if now is None else now
        pipe = self._redis.pipeline(transaction=False)
        for fingerprint in set(fingerprints):
            key = self._key(fingerprint)
            pipe.zadd(key, {tenant: stamp})
            pipe.expire(key, self._ttl)
        pipe.execute()

    def owners(self, fingerprints: Sequence[int], now: float | None = None) -> list[frozenset[str]]:
        if not fingerprints:
            return []
        horizon = (self._clock() if now is None else now) - self.window_s
        pipe = self._redis.pipeline(transaction=False)
        for fingerprint in fingerprints:
            pipe.zrangebyscore(self._key(fingerprint), horizon, "+inf")
        return [frozenset(m.decode() if isinstance(m, bytes) else str(m) for m in members)
                for members in pipe.execute()]

    def close(self) -> None:
        self._redis.close()
