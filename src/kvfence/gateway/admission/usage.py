"""How many tokens an answer cost, for the tokens-per-minute limit (``limits.py``).

The backend's own ``usage`` is the source whenever it gives one: ``usage.completion_tokens`` of a whole
answer, or of a streamed answer's usage chunk (``stream_options.include_usage``, which the gateway asks
for on behalf of a token-limited tenant when the client did not: that extra chunk, usage and no
choices, is then taken out of what the client sees). A backend that gives no usage gets its answer's
text counted with the same counter as the prompt caps (``tokens.py``: the backend's tokenizer, or the
stated over-counting approximation). Pure logic: JSON in, counts out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvfence.gateway.admission.caps import CapResult
from kvfence.gateway.admission.tokens import TokenCounter

__all__ = ["DEFAULT_ANSWER_RESERVE", "Reservation", "StreamUsage", "answer_completion_tokens", "completion_reservation", "wants_usage_injection"]

# Completion tokens reserved per sequence for a request that names no ``max_tokens`` when the
# backend's context is unknown (no capacity endpoint, no policy facts): the common default output
# limit of hosted chat models; the reservation is settled to the real usage when the answer ends.
DEFAULT_ANSWER_RESERVE = 4096

# Text fields of a chat delta / message that the model generated.
_CHAT_TEXT_FIELDS = ("content", "reasoning_content", "reasoning", "refusal")


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _named_budget(body: dict[str, Any]) -> int | None:
    """``max_completion_tokens`` (or ``max_tokens``) when the body names one, else None."""
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):  # the last: Responses
        budget = _positive_int(body.get(key))
        if budget is not None:
            return budget
    return None


def _num_prompts(body: dict[str, Any]) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        return len(prompt)  # a batch: strings, or token-id lists (a flat id list is one prompt)
    return 1


@dataclass(frozen=True, slots=True)
class Reservation:
    """Completion tokens to hold at admission. ``shrinkable``: the body named no maximum, so the
    reservation is an estimate that may shrink to what the tenant's window still leaves (the request is
    refused only when not even one answer token fits); a named maximum is held whole or refused."""

    tokens: int
    shrinkable: bool = False


def completion_reservation(body: dict[str, Any], cap: CapResult | None = None,
                           tokens_per_minute: int | None = None) -> Reservation:
    """The most completion tokens a request can cost: what is reserved at admission (``limits.py``).

    A body that names ``max_completion_tokens`` (or ``max_tokens``) reserves it x choices (max of
    ``n`` and ``best_of``) x prompts (a completions batch); ``best_of`` counts, although only ``n``
    choices come back: the backend generates (and usually bills) every one of its sequences.
    ``max_tokens: 0`` (scoring a prompt) reserves nothing.

    A body that names no maximum may generate until the backend's context is full, so it reserves
    that: per prompt, the chosen backend's real maximum (``cap.context_limit``: min of advertised
    context and KV capacity) minus the prompt, or :data:`DEFAULT_ANSWER_RESERVE` per sequence when
    the backend's maximum is unknown; x choices. With ``tokens_per_minute`` the implicit reservation
    is capped to what the limit leaves after the prompt, so a request is never "too large" for a
    maximum it did not name; at admission it shrinks further to what the window leaves
    (``shrinkable``). So requests without ``max_tokens`` run one after another without waiting for the
    window to slide, but one in flight holds the rest of the window: a second one at the same time is
    refused with 429 until the first settles (a client that wants several answers at once names
    ``max_tokens``).
    """
    choices = max(_positive_int(body.get("n")) or 1, _positive_int(body.get("best_of")) or 1)
    prompts = _num_prompts(body)
    budget = _named_budget(body)
    if budget is not None:
        return Reservation(budget * choices * prompts)
    if cap is not None and cap.context_limit is not None:
        # sum over the prompts of (context - prompt_i); total_prompt_tokens is their sum
        room = max(0, prompts * cap.context_limit - (cap.total_prompt_tokens or cap.prompt_tokens))
    else:
        room = DEFAULT_ANSWER_RESERVE * prompts
    reserve = room * choices
    if tokens_per_minute is not None:
        prompt_tokens = cap.total_prompt_tokens if cap is not None else 0
        reserve = min(reserve, max(0, tokens_per_minute - prompt_tokens))
    return Reservation(reserve, shrinkable=True)


def wants_usage_injection(body: dict[str, Any]) -> bool:
    """True when a streamed request did not ask for usage itself (so the gateway should, and hide it)."""
    options = body.get("stream_options")
    return not (isinstance(options, dict) and options.get("include_usage") is True)


def _usage_completion_tokens(chunk: dict[str, Any]) -> int | None:
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        value = usage.get("completion_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _choice_texts(choice: Any, key: str) -> list[str]:
    """Generated text of one choice: ``key`` is "delta" (chat chunk), "message" (chat answer) or "text"."""
    if not isinstance(choice, dict):
        return []
    if key == "text":
        text = choice.get("text")
        return [text] if isinstance(text, str) else []
    part = choice.get(key)
    if not isinstance(part, dict):
        return []
    out = [v for f in _CHAT_TEXT_FIELDS if isinstance(v := part.get(f), str)]
    for call in part.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out += [v for f in ("name", "arguments") if isinstance(v := function.get(f), str)]
    return out


def answer_completion_tokens(answer: Any, counter: TokenCounter) -> tuple[int, str]:
    """Completion tokens of a whole (non-streamed) answer and where the figure came from
    ("usage" or "count")."""
    if not isinstance(answer, dict):
        return 0, "count"
    reported = _usage_completion_tokens(answer)
    if reported is not None:
        return reported, "usage"
    texts: list[str] = []
    for choice in answer.get("choices") or ():
        texts += _choice_texts(choice, "text" if isinstance(choice, dict) and "text" in choice else "message")
    return (counter.count_text("".join(texts)) if texts else 0), "count"


class StreamUsage:
    """Watches a streamed answer's chunks; says which chunk to hide and what the answer cost.

    ``injected``: the gateway added ``include_usage`` to the request, so the usage the backend sends
    is for the gateway only: a usage-only chunk is hidden, usage riding on a chunk with choices removed.
    """

    def __init__(self, counter: TokenCounter, *, injected: bool) -> None:
        self._counter = counter
        self._injected = injected
        self._reported: int | None = None
        self._texts: list[str] = []

    def observe(self, chunk: Any) -> str:
        """Look at one decoded chunk: "pass" it unchanged, "drop" it, or it was "edited" (re-encode it)."""
        if not isinstance(chunk, dict):
            return "pass"
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                self._texts += _choice_texts(choice, "delta" if isinstance(choice, dict) and "delta" in choice
                                             else "text")
        if "usage" not in chunk:
            return "pass"
        reported = _usage_completion_tokens(chunk)
        if reported is not None:
            self._reported = reported  # cumulative when a backend sends usage on every chunk: last wins
        if not self._injected:
            return "pass"
        if not choices:
            return "drop"
        del chunk["usage"]
        return "edited"

    def completion_tokens(self) -> tuple[int, str]:
        """What the answer cost: the backend's usage if it sent one, else its text counted."""
        if self._reported is not None:
            return self._reported, "usage"
        return (self._counter.count_text("".join(self._texts)) if self._texts else 0), "count"
