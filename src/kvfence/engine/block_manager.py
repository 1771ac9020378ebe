"""The page allocator and its ownership ledger: where invariants I1 and I2 of DESIGN.md live.

The KV pool is ``num_pages`` fixed-size pages that are shared by every request and not zeroed by
themselves; only this ledger says who may read which page. Every page is in one state:

* ``FREE``: on the free list; its bytes are zero or queued on the scrub list;
* ``OWNED``: written by exactly one request (``owner``), mapped only by it (ref_count 1);
* ``CACHED``: a sealed prefix page of one cache scope, holding the KV of ``tokens`` after the
  prefix whose hash is ``parent_hash``; mapped by any number of same-scope requests, and kept
  in an LRU for same-scope revival once nobody maps it.

I1 (who may read a page): :meth:`BlockManager.allocate` maps a cached page only when its scope key
equals the request's, its parent hash equals the request's prefix hash and its stored tokens equal
the request's tokens (the hash finds a candidate; the comparison decides). Pages are sealed only
after their KV was computed (:meth:`BlockManager.seal`), so no request reads a page that another
request admitted in the same step has not written yet.

I2 (no stale bytes): a page that leaves a request or is evicted from the cache goes on the scrub
list, which the model runner zero-fills before the next forward pass, before anyone reads it.
Only a same-scope revival of a cached page skips the scrub. ``scrub=False`` is a benchmark-only,
unsafe switch.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import struct
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass

from kvfence.engine.scope import is_unshared
from kvfence.engine.sequence import Sequence
from kvfence.errors import CapacityError, ConfigError, IsolationViolation

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
    """Allocates KV pages to sequences and keeps the ownership ledger (I1, I2)."""

    def __init__(self, num_pages: int, page_size: int, *, scrub: bool = True) -> None:
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
        self._pages = [_Page() for _ in range(num_pages)]
        self._free: deque[int] = deque(range(num_pages))
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached pages nobody maps, oldest first
        self._cache: dict[bytes, int] = {}  # prefix hash -> cached page
        self._scrub_pending: dict[int, None] = {}  # ordered set
        # The ledger's own copy of every block table: release and sealing follow it, so a
        # corrupted Sequence.block_table can never free or seal a page it was not given.
        self._tables: dict[str, list[int]] = {}
        self._chain: dict[str, list[bytes]] = {}  # per request: hashes of its pages so far
        self.prefix_hit_tokens_by_scope: dict[bytes, int] = {}

    # ---- sizes -------------------------------------------------------------------------------

    @property
    def num_free_pages(self) -> int:
        """Pages that can be handed out now: free ones plus unreferenced cached ones (evictable)."""
        return len(self._free) + len(self._lru)

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
        return fresh <= self.num_free_pages - revived

    def allocate(self, seq: Sequence) -> None:
        """Map prefix-cache hits, then fresh pages for the rest of ``seq.token_ids``.

        All or nothing: raises CapacityError (before touching anything) when the pages don't fit.
        """
        if seq.block_table or seq.request_id in self._tables:
            raise ValueError(f"sequence {seq.request_id!r} already holds pages")
        hits = self._match_prefix(seq)
        revived = sum(1 for page_id, _ in hits if self._pages[page_id].ref_count == 0)
        fresh = self.pages_needed(seq.num_tokens) - len(hits)
        if fresh > self.num_free_pages - revived:
            raise CapacityError(
                f"request {seq.request_id!r} needs {fresh} free KV pages, {self.num_free_pages - revived} are free"
            )
        block_table: list[int] = []
        for page_id, _ in hits:
            page = self._pages[page_id]
            if page.ref_count == 0:
                del self._lru[page_id]  # same-scope revival: its KV is valid, no scrub (I2)
            page.ref_count += 1
            block_table.append(page_id)
        for _ in range(fresh):
            block_table.append(self._take_fresh_page(seq.request_id))
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

    def _take_fresh_page(self, request_id: str) -> int:
        if self._free:
            page_id = self._free.popleft()  # already scrubbed or on the scrub list (I2)
        elif self._lru:
            page_id, _ = self._lru.popitem(last=False)
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

    def _retire(self, page_id: int) -> None:
        """The page's content is dead: new generation, queue the zero-fill (I2)."""
        page = self._pages[page_id]
        page.state, page.owner, page.scope_key, page.ref_count = PageState.FREE, None, None, 0
        page.content_hash = page.parent_hash = page.tokens = None
        page.generation += 1
        self._scrub_pending[page_id] = None

    def can_append(self, seq: Sequence) -> bool:
        """Whether :meth:`may_append` can cover all of ``seq``'s tokens with free pages."""
        table = self._tables.get(seq.request_id, [])
        return self.pages_needed(seq.num_tokens) - len(table) <= self.num_free_pages

    def may_append(self, seq: Sequence) -> None:
        """Give ``seq`` fresh pages until its block table covers all of its tokens."""
        table = self._tables.get(seq.request_id)
        if table is None:
            raise ValueError(f"sequence {seq.request_id!r} holds no pages; allocate it first")
        needed = self.pages_needed(seq.num_tokens) - len(table)
        if needed > self.num_free_pages:
            raise CapacityError(f"request {seq.request_id!r} needs {needed} more KV pages")
        for _ in range(needed):
            page_id = self._take_fresh_page(seq.request_id)
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
        mapper leaves go to the LRU, keeping their KV for same-scope revival. Pages are released
        last-first so the LRU evicts the tail of a prefix before its head.
        """
        table = self._tables.pop(seq.request_id, None)
        self._chain.pop(seq.request_id, None)
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
                if page.ref_count == 0:
                    self._lru[page_id] = None
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
        free, lru = set(self._free), set(self._lru)
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
