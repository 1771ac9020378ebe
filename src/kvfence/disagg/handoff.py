"""Invariant I4 as a state machine: a decode worker reads a handed-over page only after verification.

Pure logic (no torch, no sockets). The sender side builds a signed :class:`Manifest` with
:func:`build_manifest`; the decode side runs one :class:`HandoffReceiver` per request:

    AWAITING_MANIFEST --manifest--> RECEIVING --pages, commit--> COMMITTED --verify--> VERIFIED
            \\____________________ any mismatch, ABORT, timeout ____________________/--> FAILED

Nothing is assumed: a COMMIT does not mean "transfer complete" until :meth:`HandoffReceiver.verify`
has recomputed the checksum of every page from the bytes that are really in the decode pool.
A failed receiver stays failed; the engine then releases and scrubs the pages it touched (I2)
and finishes the request with an error, never with an answer.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from kvfence.disagg.protocol import (
    HandoffError,
    HandoffFailure,
    Manifest,
    PageEntry,
    expected_page_count,
    page_checksum,
    prompt_digest,
    scope_digest,
)

__all__ = [
    "Expectation",
    "HandoffPhase",
    "HandoffReceiver",
    "SenderLedgerView",
    "SentPage",
    "build_manifest",
]

# ``map``-like: how many checksums run at once is the caller's choice (e.g. a thread pool's map).
MapFn = Callable[[Callable[[int], bytes], Iterable[int]], Iterator[bytes]]


class HandoffPhase(enum.Enum):
    AWAITING_MANIFEST = "awaiting_manifest"
    RECEIVING = "receiving"
    COMMITTED = "committed"
    VERIFIED = "verified"
    FAILED = "failed"


@dataclass(frozen=True)
class SentPage:
    """A page as the sender captured it: its ledger entry and its bytes."""

    page_id: int
    generation: int
    shared: bool
    payload: bytes | memoryview  # a view into one read-back buffer: no per-page copy


def build_manifest(
    *,
    request_id: str,
    sender_id: str,
    prompt_token_ids: Sequence[int],
    scope_key: bytes,
    page_size: int,
    pages: Sequence[SentPage],
    first_token: int,
    first_logprobs: dict[int, float] | None = None,
    generator_state: bytes | None = None,
    key: bytes = b"",
    map_fn: MapFn = map,
) -> Manifest:
    """The sender's signed manifest for ``pages`` (in block-table order)."""
    if not pages:
        raise ValueError("a manifest needs at least one page")
    nbytes = len(pages[0].payload)

    def checksum(i: int) -> bytes:
        p = pages[i]
        return page_checksum(p.payload, request_id=request_id, index=i, page_id=p.page_id, generation=p.generation, key=key)

    sums = list(map_fn(checksum, range(len(pages))))
    entries = tuple(
        PageEntry(index=i, page_id=p.page_id, generation=p.generation, shared=p.shared, checksum=sums[i])
        for i, p in enumerate(pages)
    )
    return Manifest(
        request_id=request_id,
        sender_id=sender_id,
        prompt_len=len(prompt_token_ids),
        prompt_digest=prompt_digest(prompt_token_ids),
        scope_digest=scope_digest(scope_key),
        page_size=page_size,
        page_nbytes=nbytes,
        first_token=first_token,
        pages=entries,
        first_logprobs=first_logprobs,
        generator_state=generator_state,
    ).signed(key)


class SenderLedgerView:
    """What the decode side has seen of each sender page's generation counter (stale-page check).

    The sender advances a page's generation every time the page is released. So a verified
    handoff that showed page ``p`` at generation ``g`` means: no later manifest may show ``p``
    below ``g``, and only a sealed prefix page (``shared``, mapped by many requests of one scope)
    may show ``p`` at ``g`` again. Anything else is a stale or replayed page.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], int] = {}

    def check(self, sender_id: str, entries: Sequence[PageEntry]) -> None:
        for e in entries:
            seen = self._seen.get((sender_id, e.page_id))
            if seen is None:
                continue
            if e.generation < seen or (e.generation == seen and not e.shared):
                raise HandoffError(
                    HandoffFailure.STALE_GENERATION,
                    f"page {e.page_id} of sender {sender_id} is at generation {e.generation}, "
                    f"but generation {seen} was already handed over",
                )

    def record(self, sender_id: str, entries: Sequence[PageEntry]) -> None:
        for e in entries:
            k = (sender_id, e.page_id)
            self._seen[k] = max(e.generation, self._seen.get(k, e.generation))

    def forget_sender(self, sender_id: str) -> None:
        """Drop a sender's history (its process is gone; a new one has a new id)."""
        for k in [k for k in self._seen if k[0] == sender_id]:
            del self._seen[k]


@dataclass(frozen=True)
class Expectation:
    """What the decode side knows independently of the sender: the request as it was submitted."""

    request_id: str
    sender_id: str
    prompt_token_ids: tuple[int, ...]
    scope_key: bytes
    page_size: int
    page_nbytes: int
    vocab_size: int
    key: bytes = b""


class HandoffReceiver:
    """Checks one request's handoff step by step (I4). Every method raises :class:`HandoffError`
    on a violation and leaves the receiver FAILED for good."""

    def __init__(self, expect: Expectation, ledger: SenderLedgerView) -> None:
        self.expect = expect
        self.ledger = ledger
        self.phase = HandoffPhase.AWAITING_MANIFEST
        self.manifest: Manifest | None = None
        self.received: set[int] = set()
        self.error: HandoffError | None = None

    @property
    def num_pages(self) -> int:
        return expected_page_count(len(self.expect.prompt_token_ids), self.expect.page_size)

    def fail(self, reason: HandoffFailure, message: str) -> HandoffError:
        """Mark the handoff FAILED (the first failure is kept) and return the error to raise."""
        if self.error is None:
            self.error = HandoffError(reason, message)
        self.phase = HandoffPhase.FAILED
        return self.error

    def _require(self, phase: HandoffPhase, what: str) -> None:
        if self.phase is HandoffPhase.FAILED:
            raise self.error or self.fail(HandoffFailure.BAD_MANIFEST, "handoff already failed")
        if self.phase is phase:
            return
        if self.phase is HandoffPhase.AWAITING_MANIFEST:
            raise self.fail(HandoffFailure.OUT_OF_ORDER, f"{what} before the manifest")
        raise self.fail(HandoffFailure.DUPLICATE, f"{what} while the handoff is {self.phase.value}")

    def _manifest(self) -> Manifest:
        if self.manifest is None:  # unreachable after _require; keeps the type exact
            raise self.fail(HandoffFailure.OUT_OF_ORDER, "no manifest")
        return self.manifest

    def _same_request(self, request_id: str, what: str) -> None:
        if request_id != self.expect.request_id:
            raise self.fail(
                HandoffFailure.WRONG_REQUEST,
                f"{what} for request {request_id!r} arrived as request {self.expect.request_id!r}",
            )

    def on_manifest(self, m: Manifest) -> None:
        """Check a manifest against the submitted request; nothing may be allocated before this."""
        self._require(HandoffPhase.AWAITING_MANIFEST, "manifest")
        ex = self.expect
        self._same_request(m.request_id, "manifest")
        if m.sender_id != ex.sender_id:
            raise self.fail(HandoffFailure.WRONG_REQUEST, f"manifest from sender {m.sender_id}, expected {ex.sender_id}")
        if not m.mac_is_valid(ex.key):
            raise self.fail(HandoffFailure.BAD_MANIFEST, "manifest MAC does not verify (corrupted or forged)")
        if m.prompt_len != len(ex.prompt_token_ids):
            raise self.fail(
                HandoffFailure.WRONG_REQUEST,
                f"manifest is for a prompt of {m.prompt_len} tokens; the request has {len(ex.prompt_token_ids)}",
            )
        if not hmac.compare_digest(m.prompt_digest, prompt_digest(ex.prompt_token_ids)):
            raise self.fail(HandoffFailure.WRONG_REQUEST, "manifest was computed for a different prompt")
        if not hmac.compare_digest(m.scope_digest, scope_digest(ex.scope_key)):
            raise self.fail(HandoffFailure.WRONG_REQUEST, "manifest was computed under a different cache scope")
        if m.page_size != ex.page_size or m.page_nbytes != ex.page_nbytes:
            raise self.fail(
                HandoffFailure.BAD_MANIFEST,
                f"page geometry {m.page_size} tokens / {m.page_nbytes} bytes, expected "
                f"{ex.page_size} / {ex.page_nbytes}",
            )
        if m.page_count != self.num_pages:
            raise self.fail(
                HandoffFailure.PAGE_COUNT,
                f"{m.page_count} pages for {m.prompt_len} tokens; ceil({m.prompt_len}/{m.page_size}) = {self.num_pages}",
            )
        if [p.index for p in m.pages] != list(range(self.num_pages)):
            raise self.fail(HandoffFailure.BAD_MANIFEST, "page indexes are not 0..n-1 in order")
        if len({p.page_id for p in m.pages}) != m.page_count or any(
            p.page_id < 0 or p.generation < 0 for p in m.pages
        ):
            raise self.fail(HandoffFailure.BAD_MANIFEST, "page ids repeat or are negative")
        if not 0 <= m.first_token < ex.vocab_size:
            raise self.fail(HandoffFailure.BAD_MANIFEST, f"first token {m.first_token} outside the vocabulary")
        try:
            self.ledger.check(m.sender_id, m.pages)
        except HandoffError as exc:
            raise self.fail(exc.reason, exc.message) from None
        self.manifest = m
        self.phase = HandoffPhase.RECEIVING

    def on_page(self, request_id: str, index: int, page_id: int, generation: int, nbytes: int) -> PageEntry:
        """Accept one page header; the caller writes the payload only when this returns."""
        self._require(HandoffPhase.RECEIVING, "page")
        self._same_request(request_id, "page")
        m = self._manifest()
        if not 0 <= index < m.page_count:
            raise self.fail(HandoffFailure.BAD_PAGE, f"page index {index} outside 0..{m.page_count - 1}")
        if index in self.received:
            raise self.fail(HandoffFailure.DUPLICATE, f"page {index} arrived twice")
        entry = m.pages[index]
        if generation != entry.generation:
            raise self.fail(
                HandoffFailure.STALE_GENERATION,
                f"page {index} carries generation {generation}, the manifest says {entry.generation}",
            )
        if page_id != entry.page_id or nbytes != m.page_nbytes:
            raise self.fail(
                HandoffFailure.BAD_PAGE,
                f"page {index}: sender page {page_id} / {nbytes} bytes, manifest says {entry.page_id} / {m.page_nbytes}",
            )
        self.received.add(index)
        return entry

    def on_commit(self, request_id: str, page_count: int) -> None:
        """The sender says it sent everything; check the count (the bytes are checked by verify)."""
        self._require(HandoffPhase.RECEIVING, "commit")
        self._same_request(request_id, "commit")
        if page_count != self.num_pages:
            raise self.fail(HandoffFailure.PAGE_COUNT, f"commit for {page_count} pages, expected {self.num_pages}")
        missing = sorted(set(range(self.num_pages)) - self.received)
        if missing:
            raise self.fail(HandoffFailure.MISSING_PAGE, f"commit while pages {missing[:8]} never arrived")
        self.phase = HandoffPhase.COMMITTED

    def verify(self, pool_bytes: Mapping[int, bytes | memoryview], *, map_fn: MapFn = map) -> None:
        """Recompute every checksum from the bytes now in the decode pool (index -> bytes).

        Only after this returns may decoding read the pages (I4).
        """
        self._require(HandoffPhase.COMMITTED, "verification")
        m = self._manifest()
        if set(pool_bytes) != set(range(m.page_count)):
            raise self.fail(HandoffFailure.MISSING_PAGE, "not every page is in the decode pool")

        def checksum(i: int) -> bytes:
            e = m.pages[i]
            return page_checksum(pool_bytes[i], request_id=m.request_id, index=i, page_id=e.page_id,
                                 generation=e.generation, key=self.expect.key)

        for entry, actual in zip(m.pages, map_fn(checksum, range(m.page_count)), strict=True):
            if not hmac.compare_digest(actual, entry.checksum):
                raise self.fail(HandoffFailure.CHECKSUM, f"page {entry.index} does not match its checksum")
        self.ledger.record(m.sender_id, m.pages)
        self.phase = HandoffPhase.VERIFIED
