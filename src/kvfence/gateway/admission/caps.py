"""Length caps: a request must fit under both the policy's limit and the backend's real capacity.

Three limits apply: the prompt alone against the tenant's and the class's ``max_prompt_tokens``;
prompt + ``max_tokens`` against what one sequence of the chosen backend can hold (min of its
advertised context and its KV capacity); and, for a request with several choices (``n`` or
``best_of`` > 1), all its sequences at once against the KV capacity, since the backend holds them
side by side. A backend that keeps one copy of the prompt for all choices (kvfence: its choices share
the prompt's pages, unless its cache scope is per request) needs prompt + k x ``max_tokens``; any
other backend is assumed to need k x (prompt + ``max_tokens``), the most it can take (vLLM shares
the prompt only when prefix caching is on, a hosted API says nothing). Over any limit, the class's
``over_cap`` action decides: reject with a 400 (default), or trim retrieved context and report how
many tokens were cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvfence.gateway.admission.api_counts import API_ENDPOINTS, api_prompt_sizes
from kvfence.gateway.admission.tokens import TokenCounter
from kvfence.gateway.admission.trim import trim_to_fit
from kvfence.gateway.errors import GatewayRequestError, PromptTooLongError
from kvfence.gateway.policy.schema import OverCapAction, OverCapConfig

__all__ = ["CapResult", "completion_budget", "count_prompt", "enforce_cap", "num_sequences", "prompt_sizes",
           "tool_schemas"]


def prompt_sizes(counter: TokenCounter, endpoint: str, body: dict[str, Any]) -> list[int]:
    """Prompt tokens of each prompt of a body (several for a completions batch or embedding inputs)."""
    if endpoint == "chat":
        return [counter.count_chat(body.get("messages") or [], tool_schemas(body))]
    if endpoint in API_ENDPOINTS:
        return api_prompt_sizes(counter, endpoint, body)
    prompt = body.get("prompt", "")
    # the suffix goes to the model with every prompt of the batch
    suffix = counter.count_text(body["suffix"]) if isinstance(body.get("suffix"), str) else 0
    if isinstance(prompt, str):
        return [counter.count_text(prompt) + suffix]
    if isinstance(prompt, list):
        if all(isinstance(t, int) for t in prompt):
            return [len(prompt) + suffix]
        return [(len(p) if isinstance(p, list) else counter.count_text(str(p))) + suffix for p in prompt]
    raise GatewayRequestError("`prompt` must be a string, a list of strings or a list of token ids",
                              param="prompt")


def tool_schemas(body: dict[str, Any]) -> list[Any] | None:
    """The function definitions a chat request sends: ``tools``, and the deprecated ``functions``."""
    schemas = [item for key in ("tools", "functions") if isinstance(body.get(key), list) for item in body[key]]
    return schemas or None


def count_prompt(counter: TokenCounter, endpoint: str, body: dict[str, Any]) -> int:
    """Prompt tokens of a chat or completions body; for a batch, the largest prompt (each must fit on its own)."""
    return max(prompt_sizes(counter, endpoint, body), default=0)


def _int_field(body: dict[str, Any], key: str, minimum: int) -> int | None:
    """``body[key]`` when given (a 400 naming it unless it is an integer >= ``minimum``), else None."""
    value = body.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise GatewayRequestError(f"`{key}` must be {what}", param=key)
    return value


def completion_budget(body: dict[str, Any], *, scores_max_tokens_0: bool = False) -> int:
    """Tokens the request may generate, as far as the body says.

    ``max_tokens: 0`` is how clients score a prompt (``echo`` + ``logprobs``, lm-evaluation-harness).
    A backend known to compute the prompt only for it (``scores_max_tokens_0``: kvfence, from its
    capacity endpoint) needs no room past the prompt, so it counts as 0 and a prompt of exactly the
    backend's context is let through; any other backend may compute one position past the prompt, so
    it counts as 1. Whether the backend accepts the call is the backend's answer.
    """
    least = 0 if scores_max_tokens_0 else 1
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = _int_field(body, key, 0)
        if value is not None:
            return max(value, least)
    return 1


def num_sequences(body: dict[str, Any]) -> int:
    """Sequences the backend generates at once for each prompt: max(``n``, ``best_of``), at least 1."""
    return max(_int_field(body, "n", 1) or 1, _int_field(body, "best_of", 1) or 1)


def _kv_prompt_limit(kv_capacity: int | None, sequences: int, budget: int, shares_prompt: bool) -> int | None:
    """Largest prompt whose ``sequences`` choices of ``budget`` tokens fit the KV pool together."""
    if kv_capacity is None or sequences == 1:
        return None  # one sequence: the per-sequence context limit already says it
    if shares_prompt:
        return kv_capacity - sequences * budget
    return kv_capacity // sequences - budget


@dataclass(frozen=True, slots=True)
class CapResult:
    prompt_tokens: int            # the largest prompt (what each length limit is checked against)
    prompt_limit: int | None      # policy / tenant cap on the prompt alone
    context_limit: int | None     # backend's real maximum for prompt + max_tokens
    tokens_cut: int = 0
    total_prompt_tokens: int = 0  # every prompt of a completions batch (what a token-rate limit charges)


def enforce_cap(
    body: dict[str, Any],
    endpoint: str,
    counter: TokenCounter,
    *,
    prompt_limit: int | None,
    context_limit: int | None,
    over_cap: OverCapConfig,
    kv_capacity: int | None = None,
    shares_prompt: bool = False,
    scores_max_tokens_0: bool = False,
) -> CapResult:
    """Check ``body`` against the limits; trim it in place when the class allows, else raise 400.

    ``context_limit`` is what one sequence may hold (prompt + ``max_tokens``); ``kv_capacity`` what
    all of a request's sequences hold together (only checked with ``n`` / ``best_of`` > 1);
    ``shares_prompt``: the backend keeps one copy of the prompt for all of them;
    ``scores_max_tokens_0``: ``max_tokens: 0`` costs it no position past the prompt (see
    :func:`completion_budget`)."""
    # an embedding generates nothing: each input alone must fit the backend's context
    budget = 0 if endpoint == "embeddings" else completion_budget(body, scores_max_tokens_0=scores_max_tokens_0)
    sequences = num_sequences(body)
    sizes = prompt_sizes(counter, endpoint, body)
    tokens = max(sizes, default=0)
    kv_limit = _kv_prompt_limit(kv_capacity, sequences, budget, shares_prompt)
    limits = [v for v in (prompt_limit, None if context_limit is None else context_limit - budget, kv_limit)
              if v is not None]
    limit = min(limits) if limits else None
    if limit is None or tokens <= limit:
        return CapResult(tokens, prompt_limit, context_limit, total_prompt_tokens=sum(sizes))
    if context_limit is not None and budget >= context_limit:
        name = next((k for k in ("max_completion_tokens", "max_tokens", "max_output_tokens") if k in body), "max_tokens")
        raise PromptTooLongError(f"{name}={budget} leaves no room for a prompt: the backend holds "
                                 f"{context_limit} tokens in all", param=name)
    if kv_limit is not None and kv_limit < 1:
        name = "best_of" if body.get("best_of") == sequences else "n"
        raise PromptTooLongError(f"{name}={sequences} choices of max_tokens={budget} leave no room for a prompt: "
                                 f"the backend's KV cache holds {kv_capacity} tokens for all of them at once",
                                 param=name)
    cut = 0
    if over_cap.action is OverCapAction.TRIM and endpoint == "chat":
        result = trim_to_fit(body.get("messages") or [], over_cap,
                             lambda msgs: counter.count_chat(msgs, tool_schemas(body)), limit)
        if result.tokens_after <= limit:
            body["messages"] = result.messages
            return CapResult(result.tokens_after, prompt_limit, context_limit, result.tokens_cut,
                             total_prompt_tokens=result.tokens_after)  # chat: one prompt
        cut = result.tokens_cut
    method = "" if counter.is_exact else " (approximate count, see tokens.py)"
    parts = []
    if prompt_limit is not None and tokens > prompt_limit:
        parts.append(f"the policy allows {prompt_limit} prompt tokens")
    if context_limit is not None and tokens + budget > context_limit:
        parts.append(f"the backend can hold {context_limit} tokens for prompt + max_tokens ({budget})")
    if kv_limit is not None and tokens > kv_limit:
        need = (f"prompt + {sequences} x max_tokens ({budget})" if shares_prompt
                else f"{sequences} x (prompt + max_tokens ({budget}))")
        parts.append(f"the backend's KV cache holds {kv_capacity} tokens for {need}, its {sequences} choices "
                     "(n / best_of) at once")
    trimmed = f"; trimming retrieved context could cut only {cut} tokens" if cut else ""
    what = "an input" if endpoint == "embeddings" else "prompt"
    raise PromptTooLongError(f"{what} is {tokens} tokens{method}, over the cap: {' and '.join(parts)}{trimmed}",
                             param=_PROMPT_PARAM.get(endpoint, "prompt"))


_PROMPT_PARAM = {"chat": "messages", "messages": "messages", "responses": "input", "embeddings": "input"}
