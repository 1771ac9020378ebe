"""The prompt's log-probabilities in the answer: vLLM's ``prompt_logprobs`` and completions' ``echo``.

vLLM's shape is a list with one entry per prompt token: ``null`` for the first, then
``{"token id": {"logprob", "rank", "decoded_token"}}`` (the prompt's own token and the top ``n``).
Legacy completions with ``echo`` and ``logprobs`` put the prompt's tokens in front of the
generated ones in the ``logprobs`` object, the first with a ``null`` log-probability, and their
``text_offset`` indexes the echoed text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvfence.engine.core.outputs import Logprob, PromptLogprobs
from kvfence.engine.text.detokenizer import IncrementalDetokenizer
from kvfence.server.openai.responses import completion_logprobs, finite_logprob

__all__ = ["echo_logprobs", "join_logprobs", "prompt_logprobs_body", "prompt_text_offsets"]

TokenText = Callable[[int], str]


def _kept(entry: dict[int, Logprob], own: int, num_top: int) -> dict[int, Logprob]:
    # The engine may have computed more alternatives than this field asks for (echo and
    # prompt_logprobs together): keep the prompt's own token and the top num_top.
    return {tid: lp for tid, lp in entry.items() if tid == own or lp.rank <= num_top}


def prompt_logprobs_body(
    prompt_ids: list[int], entries: PromptLogprobs, num_top: int
) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's ``prompt_logprobs`` JSON for one prompt (``-inf`` as -9999.0, as vLLM clamps it)."""
    body: list[dict[str, dict[str, Any]] | None] = []
    for tid, entry in zip(prompt_ids, entries, strict=True):
        if entry is None:
            body.append(None)
            continue
        body.append({
            str(t): {"logprob": finite_logprob(lp.logprob), "rank": lp.rank, "decoded_token": lp.decoded_token}
            for t, lp in _kept(entry, tid, num_top).items()
        })
    return body


def prompt_text_offsets(prompt_ids: list[int], tokenizer: Any, *, skip_special_tokens: bool, limit: int) -> list[int]:
    """Where each prompt token's text starts in the prompt's decoded text (at most ``limit``).

    Decoded incrementally, so a token holding part of a multi-byte character starts where that
    character does, and (with ``skip_special_tokens``) a special token such as BOS takes no room.
    """
    detokenizer = IncrementalDetokenizer(tokenizer, [], [], skip_special_tokens=skip_special_tokens)
    offsets: list[int] = []
    for tid in prompt_ids:
        offsets.append(min(len(detokenizer.text), limit))
        detokenizer.add(tid)
        detokenizer.take_delta()
    return offsets


def echo_logprobs(
    prompt_ids: list[int], entries: PromptLogprobs, num_top: int, token_text: TokenText, offsets: list[int]
) -> dict[str, Any]:
    """The legacy ``logprobs`` object of the echoed prompt: ``null`` for the first token's scores."""
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top: list[dict[str, float] | None] = []
    for tid, entry in zip(prompt_ids, entries, strict=True):
        if entry is None:
            tokens.append(token_text(tid))
            token_logprobs.append(None)
            top.append(None)
            continue
        scored = completion_logprobs([tid], [{t: lp.logprob for t, lp in entry.items()}], num_top, token_text)
        tokens.extend(scored["tokens"])
        token_logprobs.extend(scored["token_logprobs"])
        top.extend(scored["top_logprobs"])
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": list(offsets)}


def join_logprobs(first: dict[str, Any], then: dict[str, Any] | None) -> dict[str, Any]:
    """Two legacy ``logprobs`` objects one after the other (the echoed prompt, then the completion)."""
    if then is None:
        return first
    return {key: [*first[key], *then[key]] for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
