"""Response bodies and stream chunks in OpenAI's shapes (completions and chat)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ChoiceState",
    "chat_chunk",
    "chat_logprobs",
    "completion_chunk",
    "completion_logprobs",
    "finite_logprob",
    "usage_body",
]

TokenText = Callable[[int], str]
TokenBytes = Callable[[int], "bytes | None"]


@dataclass
class ChoiceState:
    """What one choice (one engine request) has produced so far."""

    index: int
    prompt_index: int = 0  # several choices (n > 1) share one prompt, counted once in the usage
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    finish_reason: str | None = None
    logprob_text_offset: int = 0  # streamed completions: where the next token's text starts
    keeps_output: bool = True  # False for max_tokens 0 with echo: the one token the engine samples is dropped

    def update(self, out: Any) -> None:
        """Fold one ``RequestOutput`` into this choice."""
        self.num_prompt_tokens = out.num_prompt_tokens
        self.num_cached_tokens = out.num_cached_tokens
        self.text = out.text
        self.token_ids = list(out.token_ids)
        if out.logprobs is not None:
            self.logprobs = list(out.logprobs)  # cumulative: one entry per generated token
        if out.finished:
            self.finish_reason = out.finish_reason
        if not self.keeps_output:
            self.text, self.token_ids, self.logprobs = "", [], []
            if out.finished and out.finish_reason != "abort":
                self.finish_reason = "length"  # it stopped at max_tokens, 0


def usage_body(choices: list[ChoiceState]) -> dict[str, Any]:
    """OpenAI's usage: each prompt counted once (whatever its ``n``), every generated token counted.

    A prompt's ``cached_tokens`` are the fewest any of its choices had: its choices share the
    prompt's pages, so the first computes them and the others map them.
    """
    prompts: dict[int, int] = {}
    cached: dict[int, int] = {}
    for c in choices:
        # max: a choice that has not reported yet still says 0
        prompts[c.prompt_index] = max(prompts.get(c.prompt_index, 0), c.num_prompt_tokens)
        cached[c.prompt_index] = min(cached.get(c.prompt_index, c.num_cached_tokens), c.num_cached_tokens)
    prompt = sum(prompts.values())
    completion = sum(len(c.token_ids) for c in choices)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(cached.values())},
    }


def finite_logprob(value: float) -> float:
    # JSON has no -inf; a token the sampler could never pick gets the most negative finite float.
    return value if math.isfinite(value) else -9999.0


def _ranked(entry: dict[int, float], num_top: int) -> list[tuple[int, float]]:
    return sorted(entry.items(), key=lambda kv: kv[1], reverse=True)[:num_top]


def completion_logprobs(
    token_ids: list[int], entries: list[dict[int, float]], num_top: int, token_text: TokenText, offset: int = 0
) -> dict[str, Any]:
    """The legacy completions ``logprobs`` object: tokens, token_logprobs, top_logprobs, text_offset."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top: list[dict[str, float]] = []
    offsets: list[int] = []
    for tid, entry in zip(token_ids, entries, strict=False):
        text = token_text(tid)
        tokens.append(text)
        token_logprobs.append(finite_logprob(entry.get(tid, -math.inf)))
        alternatives: dict[str, float] = {}
        for t, lp in _ranked(entry, num_top):
            # Distinct ids can decode to the same text (e.g. partial UTF-8 bytes -> U+FFFD); in this
            # legacy text-keyed format the most likely one keeps the key.
            alternatives.setdefault(token_text(t), finite_logprob(lp))
        top.append(alternatives)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}


def chat_logprobs(
    token_ids: list[int], entries: list[dict[int, float]], num_top: int, token_text: TokenText,
    token_bytes: TokenBytes | None = None,
) -> dict[str, Any]:
    """The chat ``logprobs`` object: ``{"content": [{token, logprob, bytes, top_logprobs}]}``.

    ``bytes`` are the token's own bytes when ``token_bytes`` knows them, so a token holding half
    of a multi-byte character says which half (its ``token`` text is then U+FFFD).
    """

    def as_bytes(tid: int, text: str) -> list[int]:
        raw = token_bytes(tid) if token_bytes is not None else None
        return list(raw if raw is not None else text.encode("utf-8"))

    content = []
    for tid, entry in zip(token_ids, entries, strict=False):
        text = token_text(tid)
        content.append({
            "token": text,
            "logprob": finite_logprob(entry.get(tid, -math.inf)),
            "bytes": as_bytes(tid, text),
            "top_logprobs": [
                {"token": (alt := token_text(t)), "logprob": finite_logprob(lp), "bytes": as_bytes(t, alt)}
                for t, lp in _ranked(entry, num_top)
            ],
        })
    return {"content": content}


def completion_chunk(
    request_id: str, created: int, model: str, index: int, text: str, finish_reason: str | None,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
    }


def chat_chunk(
    request_id: str, created: int, model: str, index: int, delta: dict[str, Any], finish_reason: str | None,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
    }


