"""Per-token ``logprobs`` of an answer choice, passed through the hooks' token restorers.

The OpenAI shapes: chat ``choice.logprobs.content`` / ``.refusal`` (a list of ``{token, logprob,
bytes, top_logprobs}``), completions ``choice.logprobs`` (parallel lists ``tokens``,
``token_logprobs``, ``top_logprobs``, ``text_offset``). A token restorer (see
:class:`kvfence.gateway.protection.pseudonymise.token_restore.TokenRestorer`) rewrites the token strings; a token
that covered part of a placeholder gets its restored text (possibly ``""``), its ``bytes`` recomputed
and its ``top_logprobs`` emptied (the alternatives were about placeholder text, not the answer), and
completions' ``text_offset`` is shifted so offsets still point into the restored text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["LogprobsFilter", "TokenFilter"]


class TokenFilter(Protocol):
    """What a hook's response filter may offer for per-token fields (``token_restorer()``)."""

    def feed(self, entries: Any, token_of: Any, rebuild: Any) -> list[Any]: ...

    def finish(self, token_of: Any, rebuild: Any) -> list[Any]: ...


def _chat_token(entry: Any) -> str:
    token = entry.get("token") if isinstance(entry, dict) else None
    return token if isinstance(token, str) else ""


def _chat_rebuild(entry: Any, token: str, spanned: bool) -> Any:
    if not isinstance(entry, dict):
        return entry
    out = {**entry, "token": token}
    if spanned:
        if "bytes" in entry:
            out["bytes"] = list(token.encode("utf-8"))
        if "top_logprobs" in entry:
            out["top_logprobs"] = []
    return out


@dataclass
class _CompletionEntry:
    token: str
    logprob: Any
    top: Any
    offset: Any


def _completion_token(entry: _CompletionEntry) -> str:
    return entry.token


def _completion_rebuild(entry: _CompletionEntry, token: str, spanned: bool) -> _CompletionEntry:
    top = entry.top if not spanned or entry.top is None else {}
    return _CompletionEntry(token, entry.logprob, top, entry.offset)


class LogprobsFilter:
    """One choice's per-token fields, each list through its own token filters (made by ``make_filters``
    for the list's key: chat ``content`` / ``refusal``, completions ``tokens``)."""

    def __init__(self, make_filters: Callable[[str], list[TokenFilter]]) -> None:
        self._make_filters = make_filters
        self._filters: dict[str, list[TokenFilter]] = {}
        self._cursor: int | None = None  # completions: where the next token starts in the restored text

    def _run(self, key: str, entries: list[Any], token_of: Any, rebuild: Any, *, final: bool) -> list[Any]:
        filters = self._filters.get(key)
        if filters is None:
            filters = self._filters[key] = self._make_filters(key)
        for f in filters:
            entries = f.feed(entries, token_of, rebuild)
            if final:
                entries = entries + f.finish(token_of, rebuild)
        return entries

    def chat(self, logprobs: Any, *, final: bool) -> Any:
        """Filter a chat choice's ``logprobs``; ``final``: the choice ended, flush what was held."""
        if not isinstance(logprobs, dict):
            if not final or not self._filters:
                return logprobs
            logprobs = {}
        out = dict(logprobs)
        for key in ("content", "refusal"):
            entries = logprobs.get(key)
            if isinstance(entries, list) or (final and key in self._filters):
                out[key] = self._run(key, list(entries or []), _chat_token, _chat_rebuild, final=final)
        return out

    def completion(self, logprobs: Any, *, final: bool) -> Any:
        """Filter a completions choice's ``logprobs`` (parallel lists); ``final`` as for :meth:`chat`."""
        if not isinstance(logprobs, dict):
            if not final or not self._filters:
                return logprobs
            logprobs = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        tokens = logprobs.get("tokens")
        if not isinstance(tokens, list):
            return logprobs

        def column(name: str) -> list[Any]:
            values = logprobs.get(name)
            return list(values) if isinstance(values, list) and len(values) == len(tokens) else [None] * len(tokens)

        entries: list[Any] = [_CompletionEntry(t if isinstance(t, str) else "", lp, top, off) for t, lp, top, off
                              in zip(tokens, column("token_logprobs"), column("top_logprobs"),
                                     column("text_offset"), strict=True)]
        entries = self._run("tokens", entries, _completion_token, _completion_rebuild, final=final)
        out = dict(logprobs)
        out["tokens"] = [e.token for e in entries]
        out["token_logprobs"] = [e.logprob for e in entries]
        if isinstance(logprobs.get("top_logprobs"), list):
            out["top_logprobs"] = [e.top for e in entries]
        if isinstance(logprobs.get("text_offset"), list):
            out["text_offset"] = self._offsets(entries)
        return out

    def _offsets(self, entries: list[_CompletionEntry]) -> list[Any]:
        """Offsets into the restored text: from the first token's own offset (the echoed prompt, or 0),
        each token starts where the restored tokens before it end."""
        out: list[Any] = []
        for entry in entries:
            if not isinstance(entry.offset, int) or isinstance(entry.offset, bool):
                out.append(entry.offset)
                continue
            if self._cursor is None:
                self._cursor = entry.offset
            out.append(self._cursor)
            self._cursor += len(entry.token)
        return out
