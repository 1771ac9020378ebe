"""The page allocator and its ownership ledger: where invariants I1 and I2 of DESIGN.md live.

The KV pool is ``num_pages`` fixed-size pages that are shared by every request and not zeroed by
themselves; only this ledger says who may read which page. Every page is in one state:

* ``FREE``: on the free list; its bytes are zero or queued on the scrub list;
* ``OWNED``: written by exactly one request (``owner``), mapped only by it (ref_count 1);
* ``CACHED``: a sealed prefix page of one cache scope, holding the KV of ``tokens`` after the
  prefix whose hash is ``parent_hash``; mapped by any number of same-scope requests, and *parked*
  for same-scope revival once nobody maps it (:mod:`kvfence.engine.kv.cache_partition`).

I1 (who may read a page): :meth:`BlockManager.allocate` maps a cached page only when its scope key
equals the request's, its parent hash equals the request's prefix hash and its stored tokens equal
the request's tokens (the hash finds a candidate; the comparison decides). Pages are sealed only
after their KV was computed (:meth:`BlockManager.seal`), so no request reads a page that another
request admitted in the same step has not written yet.

I2 (no stale bytes): a page that leaves a request or is evicted from the cache goes on the scrub
list, which the model runner zero-fills before the next forward pass, before anyone reads it.
Only a same-scope revival of a cached page skips the scrub. ``scrub=False`` is a benchmark-only,
unsafe switch.

I6 (no timing signal across scopes): parked pages live in per-scope partitions under a budget of
``cache_pages`` (:class:`~kvfence.engine.kv.cache_partition.ScopedPrefixCache`). An allocation takes
free pages, then parked pages of its own scope, never another scope's; so how many of my pages
survive does not depend on how much another scope asked for. The engine sizes the budget so that
the rest of the pool holds one request of ``max_model_len`` (I3: it can always run).
"""

from __future__ import annotations

import enum
import hashlib
import logging
import struct
from collections import Counter, deque
from collections.abc import Callable
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass

from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv.cache_partition import (
    PrefixCachePolicy,
    ScopedPrefixCache,
    SharedPrefixLRU,
    default_cache_budget,
    default_scope_pages,
)
from kvfence.errors import CapacityError, ConfigError, IsolationViolation
from kvfence.scope import is_unshared

__all__ = ["MAX_SCOPES_COUNTED", "OTHER_SCOPES", "BlockManager", "PageInfo", "PageState", "page_hash"]

logger = logging.getLogger(__name__)

# Prefix-hit counters are kept per scope for at most this many scopes; later scopes count together
# under OTHER_SCOPES. A client that mints cache_salts mints scopes: without a bound it would grow
# this dict, every stats copy and /metrics without end.
MAX_SCOPES_COUNTED = 65536
OTHER_SCOPES = b"kvfence-other-scopes"


class PageState(enum.Enum):
    FREE = "free"
    OWNED = "owned"
    CACHED = "cached"


@dataclass(slots=True)
class _Page:
    state: PageState = PageState.FREE
    owner: str | None = None
    scope_key: bytes | None = None
    ref_count: int = 0
    generation: int = 0
    content_hash: bytes | None = None
    parent_hash: bytes | None = None
    tokens: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class PageInfo:
    """A read-only snapshot of one ledger entry (for tests, paranoid checks and handoff manifests)."""

    page_id: int
    state: PageState
    owner: str | None
    scope_key: bytes | None
    ref_count: int
    generation: int
    content_hash: bytes | None
    tokens: tuple[int, ...] | None


def page_hash(scope_key: bytes, parent_hash: bytes | None, tokens: SequenceABC[int]) -> bytes:
    """BLAKE2b-256 of (scope key, parent page hash, page tokens): the prefix-cache key.

    The scope key is length-prefixed and the parent hash is marked present/absent, so no two
    different inputs share an encoding. Token ids are 8-byte signed integers.
    """
    h = hashlib.blake2b(digest_size=32, person=b"kvfence-page")
    h.update(len(scope_key).to_bytes(4, "big"))
    h.update(scope_key)
    h.update(b"\x01" + parent_hash if parent_hash is not None else b"\x00")
    h.update(struct.pack(f">{len(tokens)}q", *tokens))
    return h.digest()


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
        self.scrub = scrub
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
        self._pages = [_Page() for _ in range(num_pages)]
        self._free: deque[int] = deque(range(num_pages))
        self._cache: dict[bytes, int] = {}  # prefix hash -> cached page
        self._scrub_pending: dict[int, None] = {}  # ordered set
        # The ledger's own copy of every block table: release and sealing follow it, so a
        # corrupted Sequence.block_table can never free or seal a page it was not given.
        self._tables: dict[str, list[int]] = {}
        self._chain: dict[str, list[bytes]] = {}  # per request: hashes of its pages so far
        self.prefix_hit_tokens_by_scope: dict[bytes, int] = {}

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
        p = self._pages[page_id]
        return PageInfo(
            page_id, p.state, p.owner, p.scope_key, p.ref_count, p.generation, p.content_hash, p.tokens
        )

    def held_pages(self, request_id: str) -> list[int]:
        """The pages the ledger gave ``request_id``, in block-table order (a copy; [] if none)."""
        return list(self._tables.get(request_id, ()))

    # ---- allocation --------------------------------------------------------------------------

    def _match_prefix(self, seq: Sequence) -> list[tuple[int, bytes]]:
        """Cached pages this sequence may map (I1): same scope, same parent, same tokens.

        Only full pages before the page holding the last token, so that at least one token is
        always computed and sampled from. None for a sequence that asks for prompt
        log-probabilities: a hit would skip positions it must score.
        """
        hits: list[tuple[int, bytes]] = []
        # A request scoring its prompt (prompt_logprobs) computes every position: it maps no hit.
        if is_unshared(seq.scope_key) or seq.wants_prompt_logprobs:
            return hits
        parent: bytes | None = None
        for i in range((seq.num_tokens - 1) // self.page_size):
            tokens = tuple(seq.token_ids[i * self.page_size : (i + 1) * self.page_size])
            h = page_hash(seq.scope_key, parent, tokens)
            page_id = self._cache.get(h)
            if page_id is None:
                break
            page = self._pages[page_id]
            # The hash only finds a candidate; equality of scope, parent and tokens decides.
            if (
                page.state is not PageState.CACHED
                or page.scope_key != seq.scope_key
                or page.parent_hash != parent
                or page.tokens != tokens
            ):
                logger.error("prefix-cache entry for page %d does not match its hash; not mapped", page_id)
                break
            hits.append((page_id, h))
            parent = h
        return hits

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
        seq.num_cached_tokens = len(hits) * self.page_size
        seq.num_computed_tokens = seq.num_cached_tokens
        self._tables[seq.request_id] = block_table
        self._chain[seq.request_id] = [h for _, h in hits]
        if hits:  # only scopes with hits, so per-request scope keys don't grow this dict
            counts = self.prefix_hit_tokens_by_scope
            scope = seq.scope_key
            if scope not in counts and len(counts) >= MAX_SCOPES_COUNTED:
                scope = OTHER_SCOPES
            counts[scope] = counts.get(scope, 0) + seq.num_cached_tokens

    def _take_fresh_page(self, seq: Sequence) -> int:
        request_id = seq.request_id
        if self._free:
            page_id = self._free.popleft()  # already scrubbed or on the scrub list (I2)
        elif (parked := self._parked.take_for(seq.scope_key)) is not None:
            page_id = parked  # its own scope's least recently used parked page (I6)
            self._evict(page_id)
        else:
            raise CapacityError("the KV pool has no free page")
        page = self._pages[page_id]
        page.state, page.owner, page.ref_count = PageState.OWNED, request_id, 1
        return page_id

    def _evict(self, page_id: int) -> None:
        page = self._pages[page_id]
        if page.content_hash is not None and self._cache.get(page.content_hash) == page_id:
            del self._cache[page.content_hash]
        self._retire(page_id)

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

    def _retire(self, page_id: int) -> None:
        """The page's content is dead: new generation, queue the zero-fill (I2)."""
        page = self._pages[page_id]
        page.state, page.owner, page.scope_key, page.ref_count = PageState.FREE, None, None, 0
        page.content_hash = page.parent_hash = page.tokens = None
        page.generation += 1
        self._scrub_pending[page_id] = None

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
        chain = self._chain.get(seq.request_id)
        table = self._tables.get(seq.request_id)
        if chain is None or table is None or is_unshared(seq.scope_key):
            return  # a per-request scope shares nothing: its pages stay owned and are scrubbed on release
        num_full = min(seq.num_computed_tokens // self.page_size, len(table))
        for i in range(len(chain), num_full):
            tokens = tuple(seq.token_ids[i * self.page_size : (i + 1) * self.page_size])
            parent = chain[i - 1] if i else None
            h = page_hash(seq.scope_key, parent, tokens)
            page = self._pages[table[i]]
            if page.state is PageState.OWNED and page.owner == seq.request_id and h not in self._cache:
                page.state, page.owner, page.scope_key = PageState.CACHED, None, seq.scope_key
                page.content_hash, page.parent_hash, page.tokens = h, parent, tokens
                self._cache[h] = table[i]
            chain.append(h)

    def deallocate(self, seq: Sequence) -> None:
        """Release every page of ``seq`` (finish, abort, preemption).

        Owned pages are retired onto the free list and the scrub list (I2); cached pages whose last
        mapper leaves are parked in their scope's partition, keeping their KV for same-scope
        revival, as far as the scope's share allows (I6). Pages are released last-first so a
        scope's LRU evicts the tail of a prefix before its head.
        """
        table = self._tables.pop(seq.request_id, None)
        self._chain.pop(seq.request_id, None)
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
                self._retire(page_id)
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
        pages = list(self._scrub_pending)
        self._scrub_pending.clear()
        return pages if self.scrub else []

    def flush_scrub(self, zero_fill: Callable[[list[int]], None], pages: list[int] | None = None) -> None:
        """Zero-fill ``pages`` (default: the scrub list, taken now) with ``zero_fill`` (I2).

        If ``zero_fill`` raises, the pages go back on the scrub list before the error propagates:
        a failed scrub must never leave a page on the free list with its old KV and nobody owing
        its zero-fill. The next scrub, at the latest the one before the next forward pass, retries
        them, so they are still zero before any request writes or reads them.
        """
        if pages is None:
            pages = self.take_scrub_list()
        try:
            zero_fill(pages)
        except BaseException:
            if self.scrub:
                self._scrub_pending.update(dict.fromkeys(pages))  # I2: still owed
            raise

    # ---- checks ------------------------------------------------------------------------------

    def ledger_block_table(self, seq: Sequence) -> list[int]:
        """The block table the ledger says ``seq`` holds, for releasing it after an I1 violation.

        Keeps the pages of ``seq.block_table`` that are its own or same-scope cached ones (in order,
        once each) and adds back its own pages that a corrupted table lost, so the release neither
        touches another request's page nor leaks one of its own.
        """
        kept: list[int] = []
        for page_id in seq.block_table:
            if not 0 <= page_id < self.num_pages or page_id in kept:
                continue
            page = self._pages[page_id]
            own = page.state is PageState.OWNED and page.owner == seq.request_id
            cached = page.state is PageState.CACHED and page.scope_key == seq.scope_key and page.ref_count > 0
            if own or cached:
                kept.append(page_id)
        for page_id, page in enumerate(self._pages):
            if page.state is PageState.OWNED and page.owner == seq.request_id and page_id not in kept:
                kept.append(page_id)
        return kept

    def verify(self, seq: Sequence) -> None:
        """Check I1 for ``seq``: each page is its own or a same-scope cached page with its tokens.

        ``seq.block_table`` (what the model runner reads) must also equal the ledger's copy.
        """
        seen: set[int] = set()
        for i, page_id in enumerate(seq.block_table):
            if not 0 <= page_id < self.num_pages or page_id in seen:
                raise IsolationViolation(f"request {seq.request_id!r}: bad page {page_id} at index {i}")
            seen.add(page_id)
            page = self._pages[page_id]
            if page.state is PageState.OWNED and page.owner == seq.request_id:
                continue
            expected = tuple(seq.token_ids[i * self.page_size : (i + 1) * self.page_size])
            if page.state is PageState.CACHED and page.scope_key == seq.scope_key and page.tokens == expected:
                continue
            raise IsolationViolation(
                f"I1 violated: request {seq.request_id!r} maps page {page_id} at index {i}, which is "
                f"{page.state.value} (owner {page.owner!r}, same scope: {page.scope_key == seq.scope_key})"
            )
        # also catches a same-scope page with equal tokens that seq maps without holding a reference
        table = self._tables.get(seq.request_id, [])
        if seq.block_table != table:
            raise IsolationViolation(
                f"I1 violated: block table of request {seq.request_id!r} is {seq.block_table}, "
                f"the ledger gave it {table}"
            )

    def check_invariants(self) -> None:
        """Global ledger consistency; raises IsolationViolation listing every problem found."""
        problems: list[str] = []
        refs: Counter[int] = Counter()
        holders: dict[int, set[str]] = {}
        for rid, table in self._tables.items():
            refs.update(table)
            for page_id in table:
                holders.setdefault(page_id, set()).add(rid)
        parked_by_scope = self._parked.parked_pages()
        lru = {page_id for pages in parked_by_scope.values() for page_id in pages}
        free = set(self._free)
        if len(lru) != self._parked.num_parked or sum(map(len, parked_by_scope.values())) != len(lru):
            problems.append("the parked-page count disagrees with the partitions")
        for scope, pages in parked_by_scope.items():
            if any(self._pages[p].scope_key != scope for p in pages):
                problems.append(f"a page is parked under another scope than its own ({scope.hex()[:12]})")
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
        if len(free) != len(self._free):
            problems.append("a page is on the free list twice")
        for page_id, page in enumerate(self._pages):
            if page.ref_count != refs[page_id]:
                problems.append(f"page {page_id}: ref_count {page.ref_count}, mapped {refs[page_id]} times")
            if (page_id in free) != (page.state is PageState.FREE):
                problems.append(f"page {page_id}: state {page.state.value} vs free list")
            if (page_id in lru) != (page.state is PageState.CACHED and page.ref_count == 0):
                problems.append(f"page {page_id}: state {page.state.value}, refs {page.ref_count} vs LRU")
            if page.state is PageState.OWNED and holders.get(page_id) != {page.owner}:
                problems.append(f"page {page_id}: owned by {page.owner!r}, mapped by {holders.get(page_id)}")
            if page.state is PageState.CACHED and (
                page.content_hash is None or self._cache.get(page.content_hash) != page_id
            ):
                problems.append(f"page {page_id}: cached but not in the prefix index")
        if len(self._cache) != sum(p.state is PageState.CACHED for p in self._pages):
            problems.append("the prefix index and the ledger disagree")
        used = sum(p.ref_count > 0 for p in self._pages)
        if len(free) + len(lru) + used != self.num_pages:
            problems.append(f"free {len(free)} + cached-unused {len(lru)} + used {used} != {self.num_pages}")
        if problems:
            raise IsolationViolation("page ledger inconsistent: " + "; ".join(problems))
