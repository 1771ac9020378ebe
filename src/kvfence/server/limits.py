"""Per-key concurrency limits: how many requests one API key may have in flight."""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["ConcurrencyLimiter"]


class ConcurrencyLimiter:
    """Counts in-flight requests per key; ``try_acquire`` refuses beyond the key's limit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: Counter[str] = Counter()

    def try_acquire(self, key_id: str, limit: int | None) -> bool:
        with self._lock:
            if limit is not None and self._in_flight[key_id] >= limit:
                return False
            self._in_flight[key_id] += 1
            return True

    def release(self, key_id: str) -> None:
        with self._lock:
            self._in_flight[key_id] -= 1
            if self._in_flight[key_id] <= 0:
                del self._in_flight[key_id]

    def in_flight(self, key_id: str) -> int:
        with self._lock:
            return self._in_flight[key_id]
