"""Invariant I2 at the pool, for every runner (torch's :class:`~.model_runner.ModelRunner` and the
native :class:`~kvfence.engine.native.runner.NativeRunner`): before any forward pass or handoff
touches the KV pool, the pages on the page ledger's scrub list are zero-filled, and a pool that is
still owed a zero-fill is never touched. No torch here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kvfence.errors import IsolationViolation

__all__ = ["ScrubLedger", "page_runs", "scrub_released"]


class ScrubLedger(Protocol):
    """What a runner needs of the page ledger (:class:`~kvfence.engine.kv.page_ledger.PageLedger`)."""

    @property
    def num_pending_scrub(self) -> int: ...

    def flush_scrub(self, zero_fill: Callable[[list[int]], None]) -> None: ...


def scrub_released(ledger: ScrubLedger, zero_fill: Callable[[list[int]], None]) -> None:
    """Zero-fill every page on ``ledger``'s scrub list with ``zero_fill`` now (I2); raise
    :class:`IsolationViolation` if any page is still owed its zero-fill after (only a ``zero_fill``
    that swallowed pages could leave one), so the caller never goes on to touch the pool."""
    ledger.flush_scrub(zero_fill)
    if ledger.num_pending_scrub:
        raise IsolationViolation(f"{ledger.num_pending_scrub} released pages are still owed their zero-fill")


def page_runs(pages: list[int]) -> list[tuple[int, int]]:
    """Sorted runs of consecutive page ids, as ``(first, last)`` pairs: one memset per run."""
    runs: list[tuple[int, int]] = []
    for page in sorted(set(pages)):
        if runs and page == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], page)
        else:
            runs.append((page, page))
    return runs
