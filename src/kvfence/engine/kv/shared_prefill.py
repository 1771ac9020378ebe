"""Identical prompts of one cache scope are prefilled once.

When a request arrives whose prompt (token for token) and scope key equal those of a request
still computing its prompt, it is held back until that *leader* has sealed its prompt pages, then
queued: its admission maps the leader's full pages as same-scope prefix hits (I1) instead of
computing them again. This is how the ``n`` choices of one prompt share their prompt's KV.
Scopes that share nothing (``request``) and prompts shorter than one full page are never held.
Pure bookkeeping: no torch, no pages.
"""

from __future__ import annotations

from kvfence.engine.core.sequence import Sequence
from kvfence.scope import is_unshared

__all__ = ["SharedPrefill"]


class SharedPrefill:
    """Followers waiting for their leader's prompt pages, keyed by (scope key, prompt)."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self._leaders: dict[tuple[bytes, tuple[int, ...]], Sequence] = {}
        self._followers: dict[str, list[Sequence]] = {}  # leader request id -> held sequences

    @property
    def num_held(self) -> int:
        return sum(len(f) for f in self._followers.values())

    def hold(self, seq: Sequence) -> bool:
        """Hold ``seq`` back when a same-scope leader is computing the same prompt; else make it a leader.

        Returns True when held (the caller must not queue it yet). A request scoring its prompt
        (``prompt_logprobs``) is never held: it maps no prefix-cache page, so it has nothing to wait
        for; it may still lead, and its sealed pages serve the followers.
        """
        if is_unshared(seq.scope_key) or (seq.num_prompt_tokens - 1) // self.page_size == 0:
            return False
        key = (seq.scope_key, tuple(seq.prompt_token_ids))
        leader = self._leaders.get(key)
        if leader is None:
            self._leaders[key] = seq
        elif not _prompt_done(leader) and not seq.wants_prompt_logprobs:
            self._followers.setdefault(leader.request_id, []).append(seq)
            return True
        return False  # (a done leader keeps its entry until release() hands over its followers)

    def release(self) -> list[Sequence]:
        """Followers whose leader has computed its prompt (or ended): queue them now, in arrival order."""
        ready: list[Sequence] = []
        for key, leader in list(self._leaders.items()):
            if not _prompt_done(leader):
                continue
            del self._leaders[key]
            ready.extend(self._followers.pop(leader.request_id, []))
        return ready

    def discard(self, request_id: str) -> Sequence | None:
        """Forget a held follower (aborted before it was queued); returns it, or None if not held."""
        for leader_id, followers in self._followers.items():
            for seq in followers:
                if seq.request_id == request_id:
                    followers.remove(seq)
                    if not followers:
                        del self._followers[leader_id]
                    return seq
        return None


def _prompt_done(leader: Sequence) -> bool:
    # Sealed pages exist once the prompt is computed; an ended leader seals no more.
    return leader.is_finished or leader.num_computed_tokens >= leader.num_prompt_tokens
