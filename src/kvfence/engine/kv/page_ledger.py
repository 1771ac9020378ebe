"""The page ledger: who holds each KV page, in which state, and which pages owe a zero-fill (I1, I2).

The KV pool is ``num_pages`` fixed-size pages that are shared by every request and not zeroed by
themselves; only this ledger says who may read which page. Every page is in one state:

* ``FREE``: on the free list; its bytes are zero or queued on the scrub list;
* ``OWNED``: written by exactly one request (``owner``), mapped only by it (ref_count 1);
* ``CACHED``: a sealed prefix page of one cache scope, holding the KV of ``tokens`` after the
  prefix whose hash is ``parent_hash``; mapped by any number of same-scope requests, and *parked*
  for same-scope revival once nobody maps it (:mod:`kvfence.engine.kv.cache_partition`).

Each page carries a *generation*, bumped whenever its content dies (:meth:`PageLedger.retire`): a
handoff manifest names it, so a page reused meanwhile is told apart. A retired page goes on the
scrub list (I2), which the model runner zero-fills inside every call that reads or writes the
pool (:meth:`kvfence.engine.runner.model_runner.ModelRunner.execute`), through
:meth:`PageLedger.flush_scrub`. The ledger keeps its own copy of every block table, so a
corrupted ``Sequence.block_table`` can never free or seal a page it was not given; :meth:`verify`
(I1) and :meth:`audit` check it. Which pages are prefix pages, and under which hash, is the
prefix index's (:mod:`kvfence.engine.kv.prefix_index`); :class:`~kvfence.engine.kv.block_manager.BlockManager`
composes the two. No torch here.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvfence.engine.core.sequence import Sequence
from kvfence.errors import ConfigError, IsolationViolation

__all__ = ["PageInfo", "PageLedger", "PageState"]

logger = logging.getLogger(__name__)


class PageState(enum.Enum):
    FREE = "free"
    OWNED = "owned"
    CACHED = "cached"


@dataclass(slots=True)
class Page:
    """One ledger entry (mutable; the block manager's only)."""

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


class PageLedger:
    """Page states, the free list, the scrub list, generations and every request's block table."""

    def __init__(self, num_pages: int, *, scrub: bool = True) -> None:
        if not isinstance(num_pages, int) or num_pages < 1:
            raise ConfigError(f"the KV pool needs at least one page; got num_pages={num_pages!r}")
        self.num_pages = num_pages
        self.scrub = scrub
        self.pages = [Page() for _ in range(num_pages)]
        self.free: deque[int] = deque(range(num_pages))
        self._scrub_pending: dict[int, None] = {}  # ordered set
        self.tables: dict[str, list[int]] = {}

    # ---- transitions -------------------------------------------------------------------------

    def take_free(self, request_id: str) -> int | None:
        """The head of the free list, now owned by ``request_id`` (None when the list is empty)."""
        if not self.free:
            return None
        page_id = self.free.popleft()  # already scrubbed or on the scrub list (I2)
        self.own(page_id, request_id)
        return page_id

    def own(self, page_id: int, request_id: str) -> None:
        page = self.pages[page_id]
        page.state, page.owner, page.ref_count = PageState.OWNED, request_id, 1

    def retire(self, page_id: int) -> None:
        """The page's content is dead: new generation, queue the zero-fill (I2)."""
        page = self.pages[page_id]
        page.state, page.owner, page.scope_key, page.ref_count = PageState.FREE, None, None, 0
        page.content_hash = page.parent_hash = page.tokens = None
        page.generation += 1
        self._scrub_pending[page_id] = None

    def seal(self, page_id: int, scope_key: bytes, content_hash: bytes, parent: bytes | None,
             tokens: tuple[int, ...]) -> None:
        """An owned page whose KV is computed becomes a prefix page of ``scope_key``."""
        page = self.pages[page_id]
        page.state, page.owner, page.scope_key = PageState.CACHED, None, scope_key
        page.content_hash, page.parent_hash, page.tokens = content_hash, parent, tokens

    # ---- scrubbing (I2) ----------------------------------------------------------------------

    @property
    def num_pending_scrub(self) -> int:
        """Pages retired and not zero-filled yet (always 0 when ``scrub=False``)."""
        return len(self._scrub_pending) if self.scrub else 0

    def pending_scrub(self) -> list[int]:
        """The scrub list, not taken (a copy): what the runner zero-fills before its next pool access."""
        return list(self._scrub_pending) if self.scrub else []

    def take_scrub_list(self) -> list[int]:
        """Pages the runner must zero-fill (all layers, K and V) before the next forward pass (I2).

        Always ``[]`` when ``scrub=False`` (unsafe benchmark switch).
        """
        pages = list(self._scrub_pending)
        self._scrub_pending.clear()
        return pages if self.scrub else []

    def flush_scrub(self, zero_fill: Callable[[list[int]], None]) -> None:
        """Zero-fill the scrub list, taken now, with ``zero_fill`` (I2).

        If ``zero_fill`` raises, the pages go back on the scrub list before the error propagates:
        a failed scrub must never leave a page on the free list with its old KV and nobody owing
        its zero-fill. The runner's next pool access retries them, so they are still zero before
        any request writes or reads them.
        """
        pages = self.take_scrub_list()
        try:
            zero_fill(pages)
        except BaseException:
            if self.scrub:
                self._scrub_pending.update(dict.fromkeys(pages))  # I2: still owed
            raise

    # ---- reading -----------------------------------------------------------------------------

    def page_info(self, page_id: int) -> PageInfo:
        """Snapshot of one ledger entry (state, owner or scope, refs, generation, sealed tokens)."""
        p = self.pages[page_id]
        return PageInfo(
            page_id, p.state, p.owner, p.scope_key, p.ref_count, p.generation, p.content_hash, p.tokens
        )

    def held_pages(self, request_id: str) -> list[int]:
        """The pages the ledger gave ``request_id``, in block-table order (a copy; [] if none)."""
        return list(self.tables.get(request_id, ()))

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
            page = self.pages[page_id]
            own = page.state is PageState.OWNED and page.owner == seq.request_id
            cached = page.state is PageState.CACHED and page.scope_key == seq.scope_key and page.ref_count > 0
            if own or cached:
                kept.append(page_id)
        for page_id, page in enumerate(self.pages):
            if page.state is PageState.OWNED and page.owner == seq.request_id and page_id not in kept:
                kept.append(page_id)
        return kept

    def verify(self, seq: Sequence, page_size: int) -> None:
        """Check I1 for ``seq``: each page is its own or a same-scope cached page with its tokens.

        ``seq.block_table`` (what the model runner reads) must also equal the ledger's copy.
        """
        seen: set[int] = set()
        for i, page_id in enumerate(seq.block_table):
            if not 0 <= page_id < self.num_pages or page_id in seen:
                raise IsolationViolation(f"request {seq.request_id!r}: bad page {page_id} at index {i}")
            seen.add(page_id)
            page = self.pages[page_id]
            if page.state is PageState.OWNED and page.owner == seq.request_id:
                continue
            expected = tuple(seq.token_ids[i * page_size : (i + 1) * page_size])
            if page.state is PageState.CACHED and page.scope_key == seq.scope_key and page.tokens == expected:
                continue
            raise IsolationViolation(
                f"I1 violated: request {seq.request_id!r} maps page {page_id} at index {i}, which is "
                f"{page.state.value} (owner {page.owner!r}, same scope: {page.scope_key == seq.scope_key})"
            )
        # also catches a same-scope page with equal tokens that seq maps without holding a reference
        table = self.tables.get(seq.request_id, [])
        if seq.block_table != table:
            raise IsolationViolation(
                f"I1 violated: block table of request {seq.request_id!r} is {seq.block_table}, "
                f"the ledger gave it {table}"
            )

    def audit(self, parked: Mapping[bytes, list[int]], indexed: Mapping[bytes, int]) -> list[str]:
        """Global consistency of the ledger with the parked pages and the prefix index: the problems found."""
        problems: list[str] = []
        refs: Counter[int] = Counter()
        holders: dict[int, set[str]] = {}
        for rid, table in self.tables.items():
            refs.update(table)
            for page_id in table:
                holders.setdefault(page_id, set()).add(rid)
        lru = {page_id for pages in parked.values() for page_id in pages}
        free = set(self.free)
        for scope, pages in parked.items():
            if any(self.pages[p].scope_key != scope for p in pages):
                problems.append(f"a page is parked under another scope than its own ({scope.hex()[:12]})")
        if len(free) != len(self.free):
            problems.append("a page is on the free list twice")
        for page_id, page in enumerate(self.pages):
            if page.ref_count != refs[page_id]:
                problems.append(f"page {page_id}: ref_count {page.ref_count}, mapped {refs[page_id]} times")
            if (page_id in free) != (page.state is PageState.FREE):
                problems.append(f"page {page_id}: state {page.state.value} vs free list")
            if (page_id in lru) != (page.state is PageState.CACHED and page.ref_count == 0):
                problems.append(f"page {page_id}: state {page.state.value}, refs {page.ref_count} vs LRU")
            if page.state is PageState.OWNED and holders.get(page_id) != {page.owner}:
                problems.append(f"page {page_id}: owned by {page.owner!r}, mapped by {holders.get(page_id)}")
            if page.state is PageState.CACHED and (
                page.content_hash is None or indexed.get(page.content_hash) != page_id
            ):
                problems.append(f"page {page_id}: cached but not in the prefix index")
        if len(indexed) != sum(p.state is PageState.CACHED for p in self.pages):
            problems.append("the prefix index and the ledger disagree")
        used = sum(p.ref_count > 0 for p in self.pages)
        if len(free) + len(lru) + used != self.num_pages:
            problems.append(f"free {len(free)} + cached-unused {len(lru)} + used {used} != {self.num_pages}")
        return problems
