"""Find the request(s) that make a batch's forward pass fail, so only they are aborted.

One request can poison a whole step (a prompt that makes a kernel raise, a bad grammar, a sampler
edge case). Aborting the whole batch would let one tenant kill every other tenant's answers. So
after a failed step the batch is split in halves and retried, down to single requests: a group
that runs is kept (its KV written, its tokens sampled), a single request that still fails is the
culprit. The number of retries is bounded (about two per halving, for two culprits), so a
broken engine, where everything fails, still gives up after a few passes instead of one per request.

Pure logic: no torch, no engine; ``attempt`` runs a group and raises when it fails.
:func:`run_isolating_faults` is the whole policy (run together, bisect on failure, say whether the
engine itself is broken) shared by every loop that runs a batch: the engine's step and both sides of
disaggregated serving (prefill worker, decode worker). :func:`rewind_on_failure` restores seeded
generators, so a retried request samples as if it had run once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["FaultIsolation", "isolate_failures", "retry_budget", "rewind_on_failure", "run_isolating_faults"]

T = TypeVar("T")


class _Stateful(Protocol):
    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> Any: ...


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
    error: BaseException | None = None  # the first failure, when there was one

    @property
    def failed(self) -> list[T]:
        """Everything that did not run: culprits and, after an exhausted budget, the untested rest."""
        return self.culprits + self.untested

    @property
    def is_broken(self) -> bool:
        """Two or more requests failed and none ran even alone: the engine, not one request, is at fault."""
        return len(self.failed) > 1 and not self.succeeded


def run_isolating_faults(items: Sequence[T], attempt: Callable[[list[T]], None]) -> FaultIsolation[T]:
    """Run ``items`` together with ``attempt``; when that fails, find the culprits (:func:`isolate_failures`).

    The caller aborts ``outcome.failed`` (releasing and scrubbing their pages, I2), keeps going with
    ``outcome.succeeded``, and raises ``outcome.error`` when ``outcome.is_broken``.
    """
    outcome: FaultIsolation[T] = FaultIsolation()
    if not items:
        return outcome
    try:
        attempt(list(items))
    except Exception as exc:
        error = exc
    else:
        outcome.succeeded.extend(items)
        return outcome
    outcome = isolate_failures(items, attempt)
    outcome.error = error
    return outcome


@contextmanager
def rewind_on_failure(generators: Iterable[_Stateful | None]) -> Iterator[None]:
    """Restore each (seeded) generator's state when the block raises: a retried request samples
    exactly the tokens it samples in an undisturbed run."""
    saved = [(g, g.get_state()) for g in generators if g is not None]
    try:
        yield
    except BaseException:
        for generator, state in saved:
            generator.set_state(state)
        raise


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
