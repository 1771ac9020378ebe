"""Trimming retrieved context over the cap: least relevant to the last user message goes first.

Messages marked as retrieved (``role: tool`` by default, or a ``name`` matching the policy's
document-block patterns) are ranked by BM25 against the last user message and emptied, lowest
score first, until the request fits. Their text is replaced by a short marker instead of the
message being deleted, so a conversation with tool calls stays well-formed for the backend.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rank_bm25 import BM25Okapi

from kvfence.gateway.admission.tokens import message_text
from kvfence.gateway.policy.schema import OverCapConfig

__all__ = ["REMOVED_MARKER", "TrimResult", "is_retrieved", "rank_retrieved", "trim_to_fit"]

REMOVED_MARKER = "[retrieved context removed by the gateway: over the context cap]"
_WORD = re.compile(r"\w+", re.UNICODE)


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def is_retrieved(message: dict[str, Any], config: OverCapConfig) -> bool:
    """Whether the policy marks this message as retrieved context that may be dropped."""
    if message.get("role") in config.retrieved_roles:
        return True
    name = message.get("name")
    return isinstance(name, str) and any(fnmatch.fnmatchcase(name, p) for p in config.retrieved_names)


def _last_user_text(messages: Sequence[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def rank_retrieved(messages: Sequence[dict[str, Any]], candidates: Sequence[int]) -> list[int]:
    """Candidate indices from least to most relevant to the last user message (BM25 Okapi)."""
    if not candidates:
        return []
    corpus = [_words(message_text(messages[i].get("content"))) or ["\x00"] for i in candidates]
    query = _words(_last_user_text(messages))
    scores = BM25Okapi(corpus).get_scores(query) if query else [0.0] * len(candidates)
    # Equal scores: drop the earlier (older) block first.
    order = sorted(range(len(candidates)), key=lambda k: (float(scores[k]), k))
    return [candidates[k] for k in order]


@dataclass(frozen=True, slots=True)
class TrimResult:
    messages: list[dict[str, Any]]
    tokens_before: int
    tokens_after: int
    blocks_removed: int

    @property
    def tokens_cut(self) -> int:
        return self.tokens_before - self.tokens_after


def trim_to_fit(
    messages: Sequence[dict[str, Any]],
    config: OverCapConfig,
    count: Callable[[Sequence[dict[str, Any]]], int],
    limit: int,
) -> TrimResult:
    """Empty retrieved blocks, least relevant first, until ``count(messages) <= limit``.

    Returns the best effort; the caller rejects the request if ``tokens_after`` is still over.
    """
    work = [dict(m) for m in messages]
    before = count(work)
    total = before
    candidates = [i for i, m in enumerate(work) if is_retrieved(m, config) and message_text(m.get("content"))]
    removed = 0
    for index in rank_retrieved(work, candidates):
        if total <= limit:
            break
        work[index]["content"] = REMOVED_MARKER
        removed += 1
        total = count(work)
    return TrimResult(work, before, total, removed)
