"""The prefix index: which sealed page holds which prefix of which cache scope (I1's second half).

A sealed page is found by :func:`page_hash` of (scope key, parent page hash, page tokens); the
hash only finds a candidate, and :meth:`PrefixIndex.match` maps it only when the ledger entry's
scope, parent hash and tokens equal the request's. Per request the index keeps the chain of its
page hashes so far (what :meth:`~kvfence.engine.kv.block_manager.BlockManager.seal` extends). Page states are the ledger's
(:mod:`kvfence.engine.kv.page_ledger`). No torch here.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Sequence as SequenceABC

from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv.page_ledger import Page, PageState
from kvfence.scope import is_unshared

__all__ = ["PrefixIndex", "page_hash"]

logger = logging.getLogger(__name__)

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


class PrefixIndex:
    """Prefix hash -> sealed page, and each request's hash chain."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.by_hash: dict[bytes, int] = {}
        self._chains: dict[str, list[bytes]] = {}

    def __len__(self) -> int:
        return len(self.by_hash)

    def match(self, seq: Sequence, pages: SequenceABC[Page]) -> list[tuple[int, bytes]]:
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
        ps = self.page_size
        for i in range((seq.num_tokens - 1) // ps):
            tokens = tuple(seq.token_ids[i * ps : (i + 1) * ps])
            h = page_hash(seq.scope_key, parent, tokens)
            page_id = self.by_hash.get(h)
            if page_id is None:
                break
            page = pages[page_id]
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

    def start(self, seq: Sequence, hits: list[tuple[int, bytes]]) -> None:
        """``seq`` was admitted with ``hits``: its chain starts with their hashes."""
        self._chains[seq.request_id] = [h for _, h in hits]

    def chain(self, request_id: str) -> list[bytes] | None:
        """The hashes of ``request_id``'s pages so far (the live list; None when it holds no pages)."""
        return self._chains.get(request_id)

    def end(self, request_id: str) -> None:
        self._chains.pop(request_id, None)

    def add(self, content_hash: bytes, page_id: int) -> bool:
        """Index ``page_id`` under ``content_hash``; False when another page holds that prefix already."""
        if content_hash in self.by_hash:
            return False
        self.by_hash[content_hash] = page_id
        return True

    def discard(self, content_hash: bytes | None, page_id: int) -> None:
        """Forget ``page_id``'s entry (its content died); an entry of another page stays."""
        if content_hash is not None and self.by_hash.get(content_hash) == page_id:
            del self.by_hash[content_hash]
