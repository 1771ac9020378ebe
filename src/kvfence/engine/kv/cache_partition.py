"""Where unreferenced prefix pages wait for a same-scope revival: invariant I6 of DESIGN.md.

A sealed prefix page that nobody maps any more is *parked*: it keeps its KV so that a later request
of the same scope can map it again, and it stays in the pool until it is evicted. Which page is
evicted, and when, is a timing channel: a tenant that re-sends its own prompt reads how many of its
pages survived in ``num_cached_tokens`` (or in its time to first token). With one LRU shared by
every scope, another tenant's allocation evicts pages in proportion to its own length, and so its
prompt length shows in my hits (prime + probe). :class:`ScopedPrefixCache` closes that channel:

* **a budget.** Parked pages occupy at most ``cache_pages`` (C) pages of the pool. The engine
  chooses C so that the rest of the pool holds a request of ``max_model_len`` (I3), so a request
  never needs another scope's parked pages to run: it waits or preempts, as without a cache.
* **no cross-scope eviction by demand.** A request's allocation takes free pages, then parked
  pages of its *own* scope, never another scope's. Another scope's parked pages leave only when a
  scope *joins* the cache (below), which depends on who became active, never on how much anyone
  asked for.
* **fair shares.** The scopes that hold cache room ("holders", at most ``C // scope_pages``) each
  park at most ``C // number_of_holders`` pages: one tenant alone may use the whole budget, and
  each of many keeps at least ``scope_pages`` (Q). A scope over its share evicts its own
  least recently used pages (same-scope reuse is the point of the cache).
* **whole-scope eviction.** A scope joins when one of its requests is admitted; the holders
  shrink to the new share, and when there are already ``C // Q`` holders the least recently
  admitted scope loses all its parked pages. A minted scope (a fresh ``cache_salt``) therefore
  costs another tenant at most its share, whatever the length of the minted scope's prompts.

What is left for another tenant to observe is the number of distinct scopes that became active
(each arrival shrinks the shares), not a length. Per-request scopes never park anything.

:class:`SharedPrefixLRU` is the old single LRU over every scope, reachable only through the
``unsafe_shared_prefix_cache`` switch, to measure what the partition costs (and to show in the
tests that the prime + probe attack works without it).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from kvfence.errors import ConfigError
from kvfence.scope import is_unshared

__all__ = [
    "DEFAULT_CACHE_SCOPES", "CacheBudget", "PrefixCachePolicy", "ScopedPrefixCache", "SharedPrefixLRU",
    "default_cache_budget", "default_scope_pages",
]

# The default per-scope quota is the budget split this many ways: up to 8 tenants keep their
# cache side by side; a ninth pushes out the least recently active one.
DEFAULT_CACHE_SCOPES = 8


def default_scope_pages(cache_pages: int) -> int:
    """The default per-scope quota Q for a budget of ``cache_pages``: 1/8 of it, at least one page."""
    return max(1, cache_pages // DEFAULT_CACHE_SCOPES) if cache_pages > 0 else 0


@dataclass(frozen=True)
class CacheBudget:
    """The prefix-cache budget (pages) and, for a tight pool, the size above which a request flushes it.

    ``flush_above_pages`` is None when the pool minus the budget holds a request of
    ``max_model_len`` (the strict partition, I6 for every request). Otherwise a request that may
    grow past ``flush_above_pages`` pages (prompt + ``max_tokens``) empties every scope's parked
    pages when it is admitted and nothing is parked while it holds pages: so it never waits on
    another scope's cache (I3), and what other scopes can see is one bit with a fixed, configured
    threshold ("a request longer than this ran"), never a length.
    """

    cache_pages: int
    flush_above_pages: int | None = None


def default_cache_budget(num_pages: int, max_request_pages: int) -> CacheBudget:
    """What is left after one request of ``max_model_len``; at least half the pool (then with a flush)."""
    room = num_pages - max_request_pages
    if room >= num_pages // 2:
        return CacheBudget(room)
    # A pool sized for one full-length request (the usual --max-model-len auto on a small pool)
    # would have no cache at all: keep half of it, and let over-long requests flush it.
    half = num_pages // 2
    return CacheBudget(half, num_pages - half)


class PrefixCachePolicy(Protocol):
    """Bookkeeping of parked pages; the block manager retires every page id returned as evicted."""

    @property
    def num_parked(self) -> int: ...

    def parked_of(self, scope_key: bytes) -> int:
        """Parked pages a request of ``scope_key`` may reuse for fresh pages (its own ones)."""
        ...

    def join(self, scope_key: bytes) -> list[int]:
        """A request of ``scope_key`` is admitted: return the pages that leave the cache."""
        ...

    def park(self, page_id: int, scope_key: bytes) -> list[int]:
        """``page_id`` (a sealed page of ``scope_key``) lost its last mapper: pages that leave."""
        ...

    def unpark(self, page_id: int, scope_key: bytes) -> None:
        """A same-scope request maps ``page_id`` again (revival)."""
        ...

    def take_for(self, scope_key: bytes) -> int | None:
        """Evict one parked page a request of ``scope_key`` may reuse as a fresh page, or None."""
        ...

    def parked_pages(self) -> dict[bytes, list[int]]:
        """Every parked page by scope, least recently used first (a copy, for checks)."""
        ...


class ScopedPrefixCache:
    """Per-scope partitions of the parked prefix pages under one budget (I6, see the module doc)."""

    def __init__(self, cache_pages: int, scope_pages: int) -> None:
        for name, value in (("cache_pages", cache_pages), ("scope_pages", scope_pages)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0; got {value!r}")
        if cache_pages and not 1 <= scope_pages <= cache_pages:
            raise ConfigError(
                f"the per-scope prefix-cache quota ({scope_pages} pages) must be between 1 page and the "
                f"prefix-cache budget ({cache_pages} pages)"
            )
        self.cache_pages = cache_pages
        self.scope_pages = scope_pages
        self.max_scopes = cache_pages // scope_pages if cache_pages else 0
        # scope -> its parked pages, least recently used first; the scopes themselves are kept
        # least recently admitted first, the order in which whole scopes leave.
        self._holders: OrderedDict[bytes, OrderedDict[int, None]] = OrderedDict()
        self._num_parked = 0
        self.num_joins = 0  # scope arrivals so far: the only events that move another scope's pages

    @property
    def num_parked(self) -> int:
        return self._num_parked

    @property
    def scopes(self) -> list[bytes]:
        """The scopes holding cache room, least recently admitted first."""
        return list(self._holders)

    @property
    def share(self) -> int:
        """The most pages one holder may park now: the budget split evenly among the holders."""
        return self.cache_pages // len(self._holders) if self._holders else self.cache_pages

    def parked_of(self, scope_key: bytes) -> int:
        pages = self._holders.get(scope_key)
        return len(pages) if pages is not None else 0

    def join(self, scope_key: bytes) -> list[int]:
        if is_unshared(scope_key) or self.max_scopes == 0:
            return []
        if scope_key in self._holders:
            self._holders.move_to_end(scope_key)
            return []
        evicted: list[int] = []
        if len(self._holders) >= self.max_scopes:
            _, pages = self._holders.popitem(last=False)  # the whole least recently admitted scope
            evicted.extend(pages)
            self._num_parked -= len(pages)
        self._holders[scope_key] = OrderedDict()
        self.num_joins += 1
        share = self.share
        for other in self._holders:
            evicted.extend(self._shrink(other, share))
        return evicted

    def park(self, page_id: int, scope_key: bytes) -> list[int]:
        pages = self._holders.get(scope_key)
        if pages is None:  # no room for this scope (per-request scope, no budget, or evicted whole)
            return [page_id]
        pages[page_id] = None
        self._num_parked += 1
        return self._shrink(scope_key, self.share)

    def unpark(self, page_id: int, scope_key: bytes) -> None:
        del self._holders[scope_key][page_id]
        self._num_parked -= 1

    def take_for(self, scope_key: bytes) -> int | None:
        pages = self._holders.get(scope_key)
        if not pages:
            return None
        page_id, _ = pages.popitem(last=False)
        self._num_parked -= 1
        return page_id

    def parked_pages(self) -> dict[bytes, list[int]]:
        return {scope: list(pages) for scope, pages in self._holders.items()}

    def _shrink(self, scope_key: bytes, limit: int) -> list[int]:
        """Evict ``scope_key``'s own least recently used pages down to ``limit``."""
        pages = self._holders[scope_key]
        evicted: list[int] = []
        while len(pages) > limit:
            page_id, _ = pages.popitem(last=False)
            evicted.append(page_id)
        self._num_parked -= len(evicted)
        return evicted


class SharedPrefixLRU:
    """UNSAFE: one LRU over every scope's parked pages, as most engines keep it (breaks I6).

    Any allocation may evict any scope's least recently used page, so another tenant's prompt
    length shows in my prefix hits. For measuring the partition's cost only.
    """

    def __init__(self) -> None:
        self._lru: OrderedDict[int, bytes] = OrderedDict()

    @property
    def num_parked(self) -> int:
        return len(self._lru)

    def parked_of(self, scope_key: bytes) -> int:
        return len(self._lru)  # every parked page, whoever's

    def join(self, scope_key: bytes) -> list[int]:
        return []

    def park(self, page_id: int, scope_key: bytes) -> list[int]:
        if is_unshared(scope_key):
            return [page_id]
        self._lru[page_id] = scope_key
        return []

    def unpark(self, page_id: int, scope_key: bytes) -> None:
        del self._lru[page_id]

    def take_for(self, scope_key: bytes) -> int | None:
        if not self._lru:
            return None
        page_id, _ = self._lru.popitem(last=False)
        return page_id

    def parked_pages(self) -> dict[bytes, list[int]]:
        out: dict[bytes, list[int]] = {}
        for page_id, scope in self._lru.items():
            out.setdefault(scope, []).append(page_id)
        return out
