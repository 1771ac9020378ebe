"""Find the request(s) that make a batch's forward pass fail, so only they are aborted.

One request can poison a whole step (a prompt that makes a kernel raise, a bad grammar, a sampler
edge case). Aborting the whole batch would let one tenant kill every other tenant's answers. So
after a failed step the batch is split in halves and retried, down to single requests: a group
that runs is kept (its KV written, its tokens sampled), a single request that still fails is the
culprit. The number of retries is bounded (about two per halving, for two culprits), so a
broken engine, where everything fails, still gives up after a few passes instead of one per request.

Pure logic: no torch, no engine; ``attempt`` runs a group and raises when it fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["FaultIsolation", "isolate_failures", "retry_budget"]

T = TypeVar("T")


def retry_budget(num_items: int) -> int:
    """Retries allowed for a failed batch of ``num_items``: enough to bisect out two culprits."""
    if num_items <= 1:
        return 0
    return 4 * math.ceil(math.log2(num_items)) + 2


@dataclass
class FaultIsolation(Generic[T]):
    """Which items ran, which failed alone (culprits), which were left untested when the budget ran out."""

    succeeded: list[T] = field(default_factory=list)
    culprits: list[T] = field(default_factory=list)
    untested: list[T] = field(default_factory=list)
    attempts: int = 0

    @property
    def failed(self) -> list[T]:
        """Everything that did not run: culprits and, after an exhausted budget, the untested rest."""
        return self.culprits + self.untested


def isolate_failures(items: Sequence[T], attempt: Callable[[list[T]], None], *,
                     max_attempts: int | None = None) -> FaultIsolation[T]:
    """Re-run ``items`` (whose joint run failed) in halves until each one ran or failed on its own.

    ``attempt(group)`` must leave no trace when it raises (the caller restores what it changed),
    and commit its results when it returns.
    """
    budget = retry_budget(len(items)) if max_attempts is None else max_attempts
    result: FaultIsolation[T] = FaultIsolation()
    # Depth first, first half first: a culprit is cornered before the rest is retried. The whole
    # batch failed already, so the search starts at its halves.
    stack = _halves(list(items)) if len(items) > 1 else []
    if len(items) == 1:
        result.culprits.append(items[0])
    while stack:
        group = stack.pop()
        if result.attempts >= budget:
            result.untested.extend(group)
            continue
        result.attempts += 1
        try:
            attempt(group)
        except Exception:
            if len(group) == 1:
                result.culprits.extend(group)
            else:
                stack.extend(_halves(group))
            continue
        result.succeeded.extend(group)
    return result


def _halves(group: list[T]) -> list[list[T]]:
    """The two halves of ``group``, second first (the stack pops the first half first)."""
    mid = len(group) // 2
    return [group[mid:], group[:mid]]
