"""The page allocator: the page ledger and the prefix index together; where I1, I2 and I6 of DESIGN.md meet.

The KV pool is ``num_pages`` fixed-size pages that are shared by every request and not zeroed by
themselves; only this ledger says who may read which page. Every page is in one state:

* ``FREE``: on the free list; its bytes are zero or queued on the scrub list;
* ``OWNED``: written by exactly one request (``owner``), mapped only by it (ref_count 1);
* ``CACHED``: a sealed prefix page of one cache scope, holding the KV of ``tokens`` after the
  prefix whose hash is ``parent_hash``; mapped by any number of same-scope requests, and *parked*
  for same-scope revival once nobody maps it (:mod:`kvfence.engine.kv.cache_partition`).

The two halves live apart: :mod:`.page_ledger` (states, free list, scrub list, generations, block
tables and the audits) and :mod:`.prefix_index` (which sealed page holds which scope's prefix);
this module composes them with the prefix-cache budget of :mod:`.cache_partition`.

I1 (who may read a page): :meth:`BlockManager.allocate` maps a cached page only when its scope key
equals the request's, its parent hash equals the request's prefix hash and its stored tokens equal
the request's tokens (the hash finds a candidate; the comparison decides). Pages are sealed only
after their KV was computed (:meth:`BlockManager.seal`), so no request reads a page that another
request admitted in the same step has not written yet.

I2 (no stale bytes): a page that leaves a request or is evicted from the cache goes on the scrub
list, which the model runner zero-fills inside its next call that reads or writes the pool.
Only a same-scope revival of a cached page skips the scrub. ``scrub=False`` is a benchmark-only,
unsafe switch.

I6 (no timing signal across scopes): parked pages live in per-scope partitions under a budget of
``cache_pages`` (:class:`~kvfence.engine.kv.cache_partition.ScopedPrefixCache`). An allocation takes
free pages, then parked pages of its own scope, never another scope's; so how many of my pages
survive does not depend on how much another scope asked for. The engine sizes the budget so that
the rest of the pool holds one request of ``max_model_len`` (I3: it can always run).
"""

from __future__ import annotations

import logging
from collections import deque

from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv.cache_partition import (
    PrefixCachePolicy,
    ScopedPrefixCache,
    SharedPrefixLRU,
    default_cache_budget,
    default_scope_pages,
)
from kvfence.engine.kv.page_ledger import Page, PageInfo, PageLedger, PageState
from kvfence.engine.kv.prefix_index import PrefixIndex, page_hash
from kvfence.errors import CapacityError, ConfigError, IsolationViolation
from kvfence.scope import is_unshared

__all__ = ["MAX_SCOPES_COUNTED", "OTHER_SCOPES", "BlockManager", "PageInfo", "PageState", "page_hash"]

logger = logging.getLogger(__name__)

# Prefix-hit counters are kept per scope for at most this many scopes; later scopes count together
# under OTHER_SCOPES. A client that mints cache_salts mints scopes: without a bound it would grow
# this dict, every stats copy and /metrics without end.
MAX_SCOPES_COUNTED = 65536
OTHER_SCOPES = b"kvfence-other-scopes"


class BlockManager:
    """Allocates KV pages to sequences and keeps the ownership ledger (I1, I2, I6).

    ``cache_pages`` (C) bounds the parked (sealed, unmapped) prefix pages. Since a request never
    takes another scope's parked pages, the pool minus C must hold a request of ``max_model_len``
    (I3): :meth:`reserve` checks that, and ``None`` means "the default budget for the longest
    request" (:func:`~kvfence.engine.kv.cache_partition.default_cache_budget`; the whole pool until
    a scheduler reserves its longest request). ``flush_above_pages`` relaxes the check for a
    tight pool: a request that may grow past it empties the cache when admitted (see
    :class:`~kvfence.engine.kv.cache_partition.CacheBudget`). ``scope_pages`` (Q) is the share each
    cache scope keeps however many scopes are active (default: an eighth of C).
    ``unsafe_shared_prefix_cache=True`` restores one LRU over every scope (breaks I6).
    """

    def __init__(
        self,
        num_pages: int,
        page_size: int,
        *,
        scrub: bool = True,
        cache_pages: int | None = None,
        scope_pages: int | None = None,
        flush_above_pages: int | None = None,
        unsafe_shared_prefix_cache: bool = False,
    ) -> None:
        if not isinstance(num_pages, int) or num_pages < 1:
            raise ConfigError(f"the KV pool needs at least one page; got num_pages={num_pages!r}")
        if not isinstance(page_size, int) or page_size < 1:
            raise ConfigError(f"page_size must be an integer >= 1; got {page_size!r}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.ledger = PageLedger(num_pages, scrub=scrub)
        self.prefix_index = PrefixIndex(page_size)
        self.prefix_hit_tokens_by_scope: dict[bytes, int] = {}
        if not scrub:
            logger.warning(
                "UNSAFE: KV page scrubbing is OFF (invariant I2 disabled). Freed pages keep the "
                "previous request's KV. Use only for benchmarks, never with real tenants."
            )
        self._cache_pages_given = cache_pages is not None
        self._scope_pages_given = scope_pages
        if cache_pages is None:
            cache_pages = num_pages
        if isinstance(cache_pages, bool) or not isinstance(cache_pages, int) or not 0 <= cache_pages <= num_pages:
            raise ConfigError(f"cache_pages must be an integer in [0, {num_pages}]; got {cache_pages!r}")
        if flush_above_pages is not None and (
            isinstance(flush_above_pages, bool) or not isinstance(flush_above_pages, int) or flush_above_pages < 0
        ):
            raise ConfigError(f"flush_above_pages must be an integer >= 0 or None; got {flush_above_pages!r}")
        self.flush_above_pages = flush_above_pages
        self.unsafe_shared_prefix_cache = unsafe_shared_prefix_cache
        self._parked: PrefixCachePolicy = self._policy(cache_pages)
        self._flushing: set[str] = set()  # admitted requests over flush_above_pages: nothing parks
        self.num_cache_flushes = 0
        if unsafe_shared_prefix_cache:
            logger.warning(
                "UNSAFE: one prefix-cache LRU is shared by every cache scope (invariant I6 disabled): "
                "another tenant's prompt length shows in a tenant's prefix hits and time to first token. "
                "Use only for benchmarks."
            )

    @property
    def scrub(self) -> bool:
        """Whether released pages are zero-filled (I2); ``False`` only as the unsafe benchmark switch."""
        return self.ledger.scrub

    @property
    def _cache(self) -> dict[bytes, int]:  # the prefix index's map (tests forge entries in it)
        return self.prefix_index.by_hash

    @property
    def _pages(self) -> list[Page]:
        return self.ledger.pages

    @property
    def _free(self) -> deque[int]:
        return self.ledger.free

    @property
    def _tables(self) -> dict[str, list[int]]:
        return self.ledger.tables

    def _policy(self, cache_pages: int) -> PrefixCachePolicy:
        self.cache_pages = cache_pages
        if self.unsafe_shared_prefix_cache:
            return SharedPrefixLRU()
        scope_pages = self._scope_pages_given
        if scope_pages is None:
            scope_pages = default_scope_pages(cache_pages)
        elif not self._cache_pages_given:
            scope_pages = min(scope_pages, cache_pages)  # a default budget shrunk by reserve()
        return ScopedPrefixCache(cache_pages, scope_pages)

    def reserve(self, num_pages: int) -> None:
        """Keep room for a request of ``num_pages`` pages outside the prefix-cache budget (I3 with I6).

        No request may take another scope's parked pages, so a request of ``max_model_len`` can
        always run only if ``num_pages + cache_pages <= self.num_pages``. A budget chosen at
        construction that breaks this raises :class:`ConfigError`; one left to default shrinks to
        fit. Call before the first allocation (the scheduler does, with its ``max_model_len``).
        """
        room = self.num_pages - num_pages
        if self.unsafe_shared_prefix_cache or self.cache_pages <= room or self.flush_above_pages is not None:
            return
        if self._cache_pages_given:
            raise ConfigError(
                f"the prefix-cache budget of {self.cache_pages} pages leaves {self.num_pages - self.cache_pages} "
                f"of the {self.num_pages}-page KV pool for running requests, but a request of the longest "
                f"allowed length needs {num_pages} pages; lower the prefix-cache budget to at most "
                f"{max(room, 0)} pages, lower max_model_len, or enlarge the pool"
            )
        if self._tables or self._parked.num_parked:
            raise RuntimeError("reserve() must be called before the first allocation")
        budget = default_cache_budget(self.num_pages, num_pages)
        self.flush_above_pages = budget.flush_above_pages
        self._parked = self._policy(budget.cache_pages)

    # ---- sizes -------------------------------------------------------------------------------

    @property
    def num_free_pages(self) -> int:
        """Pages nobody maps: free ones plus parked (unreferenced cached) ones."""
        return len(self._free) + self._parked.num_parked

    @property
    def num_parked_pages(self) -> int:
        """Sealed prefix pages nobody maps, kept for same-scope revival (at most ``cache_pages``)."""
        return self._parked.num_parked

    def num_available_pages(self, scope_key: bytes) -> int:
        """Pages a request of ``scope_key`` may be given now: free ones and its own scope's parked ones (I6)."""
        return len(self._free) + self._parked.parked_of(scope_key)

    def flushes_cache(self, seq: Sequence) -> bool:
        """Whether admitting ``seq`` empties the prefix cache: it may grow past ``flush_above_pages``."""
        if self.flush_above_pages is None or self.unsafe_shared_prefix_cache:
            return False
        return self.pages_needed(seq.num_prompt_tokens + seq.params.max_tokens) > self.flush_above_pages

    def _num_allocatable(self, seq: Sequence) -> int:
        if self.flushes_cache(seq):  # every parked page will go: its hits are counted as revived
            return len(self._free) + self._parked.num_parked
        return self.num_available_pages(seq.scope_key)

    def parked_pages(self) -> dict[bytes, list[int]]:
        """The parked pages of each cache scope, least recently used first (a copy)."""
        return self._parked.parked_pages()

    @property
    def num_used_pages(self) -> int:
        """Pages mapped by at least one sequence."""
        return self.num_pages - self.num_free_pages

    @property
    def num_cached_pages(self) -> int:
        """Sealed prefix pages, mapped or not."""
        return len(self._cache)

    def pages_needed(self, num_tokens: int) -> int:
        """Pages that hold ``num_tokens`` tokens of KV."""
        return -(-num_tokens // self.page_size)

    def page_info(self, page_id: int) -> PageInfo:
        """Snapshot of one ledger entry (state, owner or scope, refs, generation, sealed tokens)."""
        return self.ledger.page_info(page_id)

    def held_pages(self, request_id: str) -> list[int]:
        """The pages the ledger gave ``request_id``, in block-table order (a copy; [] if none)."""
        return self.ledger.held_pages(request_id)

    # ---- allocation --------------------------------------------------------------------------

    def _match_prefix(self, seq: Sequence) -> list[tuple[int, bytes]]:
        """Cached pages this sequence may map (I1): see :meth:`PrefixIndex.match`."""
        return self.prefix_index.match(seq, self._pages)

    def can_allocate(self, seq: Sequence) -> bool:
        """Whether :meth:`allocate` would succeed now (cache hits counted, never partially)."""
        hits = self._match_prefix(seq)
        revived = sum(1 for page_id, _ in hits if self._pages[page_id].ref_count == 0)
        fresh = self.pages_needed(seq.num_tokens) - len(hits)
        return fresh <= self._num_allocatable(seq) - revived

    def allocate(self, seq: Sequence) -> None:
        """Map prefix-cache hits, then fresh pages for the rest of ``seq.token_ids``.

        All or nothing: raises CapacityError (before touching anything) when the pages don't fit.
        Fresh pages come from the free list, then from the request's own scope's parked pages:
        never from another scope's (I6). Admission makes the scope a cache holder (which may
        shrink the other holders' shares: the only way one scope's pages leave for another).
        """
        if seq.block_table or seq.request_id in self._tables:
            raise ValueError(f"sequence {seq.request_id!r} already holds pages")
        hits = self._match_prefix(seq)
        revived = sum(1 for page_id, _ in hits if self._pages[page_id].ref_count == 0)
        fresh = self.pages_needed(seq.num_tokens) - len(hits)
        available = self._num_allocatable(seq) - revived
        if fresh > available:
            raise CapacityError(f"request {seq.request_id!r} needs {fresh} free KV pages, {available} are free")
        # Joining never evicts this scope's own parked pages (its hits stay valid): only others'.
        self._release_parked(self._parked.join(seq.scope_key))
        block_table: list[int] = []
        for page_id, _ in hits:
            page = self._pages[page_id]
            if page.ref_count == 0:
                self._parked.unpark(page_id, seq.scope_key)  # same-scope revival: valid KV, no scrub (I2)
            page.ref_count += 1
            block_table.append(page_id)
        if self.flushes_cache(seq):
            self._flush_parked()
            self._flushing.add(seq.request_id)
        for _ in range(fresh):
            block_table.append(self._take_fresh_page(seq))
        seq.block_table = list(block_table)
        hit_tokens = len(hits) * self.page_size
        seq.num_computed_tokens = hit_tokens
        if seq.num_completion_tokens == 0:  # a recompute (preemption, RoPE switch) keeps its admission's count
            seq.num_cached_tokens = hit_tokens
        self._tables[seq.request_id] = block_table
        self.prefix_index.start(seq, hits)
        if hits:  # only scopes with hits, so per-request scope keys don't grow this dict
            counts = self.prefix_hit_tokens_by_scope
            scope = seq.scope_key
            if scope not in counts and len(counts) >= MAX_SCOPES_COUNTED:
                scope = OTHER_SCOPES
            counts[scope] = counts.get(scope, 0) + hit_tokens

    def _take_fresh_page(self, seq: Sequence) -> int:
        page_id = self.ledger.take_free(seq.request_id)  # already scrubbed or on the scrub list (I2)
        if page_id is not None:
            return page_id
        parked = self._parked.take_for(seq.scope_key)
        if parked is None:
            raise CapacityError("the KV pool has no free page")
        self._evict(parked)  # its own scope's least recently used parked page (I6)
        self.ledger.own(parked, seq.request_id)
        return parked

    def _evict(self, page_id: int) -> None:
        self.prefix_index.discard(self._pages[page_id].content_hash, page_id)
        self.ledger.retire(page_id)  # new generation, zero-fill queued (I2)

    def _flush_parked(self) -> None:
        """Empty every scope's parked pages (tight pool: an over-long request is admitted)."""
        for pages in self._parked.parked_pages().values():
            for page_id in pages:
                self._parked.unpark(page_id, self._pages[page_id].scope_key or b"")
            self._release_parked(pages)
        self.num_cache_flushes += 1

    def _release_parked(self, page_ids: list[int]) -> None:
        """Pages the cache policy let go: evicted, scrubbed (I2) and back on the free list."""
        for page_id in page_ids:
            self._evict(page_id)
            self._free.append(page_id)

    def can_append(self, seq: Sequence) -> bool:
        """Whether :meth:`may_append` can cover all of ``seq``'s tokens (free or own-scope parked pages)."""
        table = self._tables.get(seq.request_id, [])
        return self.pages_needed(seq.num_tokens) - len(table) <= self.num_available_pages(seq.scope_key)

    def may_append(self, seq: Sequence) -> None:
        """Give ``seq`` fresh pages until its block table covers all of its tokens."""
        table = self._tables.get(seq.request_id)
        if table is None:
            raise ValueError(f"sequence {seq.request_id!r} holds no pages; allocate it first")
        needed = self.pages_needed(seq.num_tokens) - len(table)
        if needed > self.num_available_pages(seq.scope_key):
            raise CapacityError(f"request {seq.request_id!r} needs {needed} more KV pages")
        for _ in range(needed):
            page_id = self._take_fresh_page(seq)
            table.append(page_id)
            seq.block_table.append(page_id)

    # ---- sealing and release -----------------------------------------------------------------

    def seal(self, seq: Sequence) -> None:
        """Register the full, computed pages of ``seq`` as prefix pages of its scope (idempotent).

        Call after the model runner wrote the KV of ``seq.num_computed_tokens`` tokens. A page whose
        hash is already cached (another same-scope request computed the same prefix) stays owned
        by ``seq`` and is scrubbed when released.
        """
        chain = self.prefix_index.chain(seq.request_id)
        table = self._tables.get(seq.request_id)
        if chain is None or table is None or is_unshared(seq.scope_key):
            return  # a per-request scope shares nothing: its pages stay owned and are scrubbed on release
        num_full = min(seq.num_computed_tokens // self.page_size, len(table))
        for i in range(len(chain), num_full):
            tokens = tuple(seq.token_ids[i * self.page_size : (i + 1) * self.page_size])
            parent = chain[i - 1] if i else None
            h = page_hash(seq.scope_key, parent, tokens)
            page = self._pages[table[i]]
            if page.state is PageState.OWNED and page.owner == seq.request_id and self.prefix_index.add(h, table[i]):
                self.ledger.seal(table[i], seq.scope_key, h, parent, tokens)
            chain.append(h)

    def deallocate(self, seq: Sequence) -> None:
        """Release every page of ``seq`` (finish, abort, preemption).

        Owned pages are retired onto the free list and the scrub list (I2); cached pages whose last
        mapper leaves are parked in their scope's partition, keeping their KV for same-scope
        revival, as far as the scope's share allows (I6). Pages are released last-first so a
        scope's LRU evicts the tail of a prefix before its head.
        """
        table = self._tables.pop(seq.request_id, None)
        self.prefix_index.end(seq.request_id)
        # An over-long request that ends no longer needs the pool: its own pages may park.
        self._flushing.discard(seq.request_id)
        if table is None:
            if seq.block_table:
                logger.error("request %r holds pages the ledger never gave it; ignored", seq.request_id)
            seq.block_table = []
            return
        if seq.block_table != table:
            # Paranoid mode aborts such a request; the release must still succeed and follow
            # the ledger, or the pages it really holds would leak and foreign ones be freed.
            logger.error(
                "block table of request %r differs from the ledger; releasing the ledger's", seq.request_id
            )
        for page_id in reversed(table):
            page = self._pages[page_id]
            if page.state is PageState.OWNED and page.owner == seq.request_id:
                self.ledger.retire(page_id)
                self._free.append(page_id)
            elif page.state is PageState.CACHED and page.ref_count > 0:
                page.ref_count -= 1
                if page.ref_count == 0 and self._flushing:  # an over-long request may need every page
                    self._release_parked([page_id])
                elif page.ref_count == 0:
                    assert page.scope_key is not None  # a CACHED page always has its scope
                    self._release_parked(self._parked.park(page_id, page.scope_key))
            else:  # only reachable through a bug in this class
                raise IsolationViolation(
                    f"ledger corrupt: request {seq.request_id!r} releases page {page_id} "
                    f"(state {page.state.value}, owner {page.owner!r}, refs {page.ref_count})"
                )
        seq.block_table = []

    def take_scrub_list(self) -> list[int]:
        """Pages the runner must zero-fill (all layers, K and V) before the next forward pass (I2).

        Always ``[]`` when ``scrub=False`` (unsafe benchmark switch).
        """
        return self.ledger.take_scrub_list()

    def pending_scrub(self) -> list[int]:
        """The scrub list, not taken (a copy): the runner zero-fills it inside its next pool access (I2)."""
        return self.ledger.pending_scrub()

    @property
    def num_pending_scrub(self) -> int:
        return self.ledger.num_pending_scrub

    # ---- checks ------------------------------------------------------------------------------

    def ledger_block_table(self, seq: Sequence) -> list[int]:
        """The block table the ledger says ``seq`` holds, for releasing it after an I1 violation
        (:meth:`PageLedger.ledger_block_table`)."""
        return self.ledger.ledger_block_table(seq)

    def verify(self, seq: Sequence) -> None:
        """Check I1 for ``seq``: each page is its own or a same-scope cached page with its tokens.

        ``seq.block_table`` (what the model runner reads) must also equal the ledger's copy.
        """
        self.ledger.verify(seq, self.page_size)

    def check_invariants(self) -> None:
        """Global ledger consistency; raises IsolationViolation listing every problem found."""
        problems: list[str] = []
        parked_by_scope = self._parked.parked_pages()
        lru = {page_id for pages in parked_by_scope.values() for page_id in pages}
        if len(lru) != self._parked.num_parked or sum(map(len, parked_by_scope.values())) != len(lru):
            problems.append("the parked-page count disagrees with the partitions")
        if self._flushing and lru:
            problems.append(f"{len(lru)} pages are parked while an over-long request runs")
        if not self.unsafe_shared_prefix_cache:
            if len(lru) > self.cache_pages:
                problems.append(f"{len(lru)} parked pages exceed the prefix-cache budget {self.cache_pages}")
            policy = self._parked
            assert isinstance(policy, ScopedPrefixCache)
            if len(parked_by_scope) > policy.max_scopes:
                problems.append(f"{len(parked_by_scope)} scopes hold cache room, at most {policy.max_scopes} may")
            over = [s for s, pages in parked_by_scope.items() if len(pages) > policy.share]
            if over:
                problems.append(f"{len(over)} scopes park more than their share of {policy.share} pages")
        problems.extend(self.ledger.audit(parked_by_scope, self._cache))
        if problems:
            raise IsolationViolation("page ledger inconsistent: " + "; ".join(problems))
