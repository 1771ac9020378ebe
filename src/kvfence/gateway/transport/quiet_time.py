"""Work that may wait a few milliseconds, done when the gateway's event loop is quiet.

Requests come in bursts: many streams end at once and their clients send the next requests at once.
Every bit of CPU a gateway process spends inside a burst delays the requests queued behind it (and
takes a core from the backend, when they share a machine), while a moment later the process sits
idle waiting for the backend. Two kinds of work need not happen inside a burst:

- a finished stream's bookkeeping: its metrics and its audit-log row (built with the times taken
  when it ended, so they read the same whenever they are written);
- the cyclic garbage collector's young-generation passes. With no reference cycles per request
  (see ``hang_up.py``) they find almost nothing, yet each one scans every object alive then: a pause
  every request in flight waits through. :meth:`QuietTime.manage_gc` moves them here and leaves the
  automatic collector only a high threshold, as a safety net.

"Quiet" is: no request started and nothing was deferred for ``quiet_s``. Nothing waits longer than
``max_delay_s``, quiet or not (a saturated gateway still writes its rows and collects), and
:meth:`drain` runs everything at once (before ``/metrics`` is read, and at shutdown).

Not deferred: anything a limit or a later request depends on (releasing a tenant's concurrency slot,
returning the upstream connection to its pool, the in-flight gauge).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["QuietTime"]

log = logging.getLogger("kvfence.gateway")

# The automatic collector's young threshold while passes run in quiet time: only a safety net
# (CPython's default is 700 allocations; this many young objects scan in a few ms).
_SAFETY_THRESHOLD = 20_000
# A quiet-time pass runs once this many allocations are pending (CPython's own default threshold).
_YOUNG_PASS_AT = 700


class QuietTime:
    """Deferred work for one event loop (one gateway process)."""

    def __init__(self, *, quiet_s: float = 0.002, max_delay_s: float = 0.1) -> None:
        self.quiet_s = quiet_s
        self.max_delay_s = max_delay_s
        self._work: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._oldest = 0.0  # when the oldest pending item (or GC need) was noticed
        self._last_busy = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._saved_thresholds: tuple[int, int, int] | None = None

    # -- on the request path ----------------------------------------------------------------------
    def busy(self) -> None:
        """A request started: the loop is not quiet now."""
        self._last_busy = time.perf_counter()
        if self._saved_thresholds is not None:
            self._arm(self._last_busy)  # its objects will want a collection pass once things calm down

    def defer(self, work: Callable[..., None], *args: Any) -> None:
        """Run ``work(*args)`` once the loop is quiet (at most ``max_delay_s`` from now)."""
        now = time.perf_counter()
        self._last_busy = now
        if not self._work:
            self._oldest = now
        self._work.append((work, args))
        self._arm(now)

    # -- running ----------------------------------------------------------------------------------
    def _arm(self, now: float) -> None:
        """Make sure a check is due on the running loop (an app served by one loop after another,
        as tests do, must not leave its work behind a timer on a loop that no longer runs)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called from outside any loop: nothing to wait for
            self.drain()
            return
        if self._timer is not None:
            if loop is self._loop:
                return
            self._timer.cancel()
        if not self._work:
            self._oldest = now
        self._loop = loop
        self._timer = loop.call_later(self.quiet_s, self._check)

    def _check(self) -> None:
        self._timer = None
        now = time.perf_counter()
        wait = min(self._last_busy + self.quiet_s, self._oldest + self.max_delay_s) - now
        if wait > 0.0005 and self._loop is not None:
            self._timer = self._loop.call_later(wait, self._check)
            return
        self.drain()

    def drain(self) -> None:
        """Run everything deferred now, then a collection pass if one is due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        work, self._work = self._work, []
        for fn, args in work:
            try:
                fn(*args)
            except Exception:  # bookkeeping must not take the process down; say so
                log.exception("deferred gateway bookkeeping failed")
        if self._saved_thresholds is not None:
            young, middle, old = gc.get_count()
            threshold = self._saved_thresholds
            if old > threshold[2]:
                gc.collect(2)
            elif middle > threshold[1]:
                gc.collect(1)
            elif young > _YOUNG_PASS_AT:
                gc.collect(0)

    # -- the collector ----------------------------------------------------------------------------
    def manage_gc(self) -> None:
        """Run young collection passes in quiet time (the ``kvfence gateway`` process only: this
        changes the interpreter's collector settings until :meth:`close`)."""
        if self._saved_thresholds is None:
            self._saved_thresholds = gc.get_threshold()
            gc.set_threshold(_SAFETY_THRESHOLD, *self._saved_thresholds[1:])

    def close(self) -> None:
        """Run what is pending and give the collector its settings back."""
        self.drain()
        if self._saved_thresholds is not None:
            gc.set_threshold(*self._saved_thresholds)
            self._saved_thresholds = None
