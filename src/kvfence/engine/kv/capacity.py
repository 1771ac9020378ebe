"""KV pool sizing and the start-up half of admission (invariant I3). Pure logic, no torch.

The incident behind kvfence advertised a context window larger than its KV pool. Here the engine
refuses to start in that case, with both numbers and what to change, unless the operator asked for
``max_model_len="auto"``, which lowers the advertised maximum to what the pool holds.

The prefix cache takes part of the pool too: parked prefix pages of one scope are never handed to
another scope's request (I6), so the pool minus the prefix-cache budget must still hold a request
of ``max_model_len``. By default the budget is what is left after one such request; a pool too
tight for that (less than half left) keeps half of itself as cache, and a request that may grow
past the other half flushes the cache when admitted (:class:`~kvfence.engine.kv.cache_partition.CacheBudget`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvfence.engine.kv.cache_partition import default_cache_budget, default_scope_pages
from kvfence.errors import CapacityError, ConfigError

__all__ = ["Capacity", "plan_capacity"]

_DEFAULT_MEMORY_CAP = 4 << 30  # bytes: default pool at most 4 GiB unless asked for more


@dataclass(frozen=True)
class Capacity:
    """What the engine can hold: advertised context, pool size in tokens and pages, scrubbing on/off,
    and the prefix-cache budget (pages parked for same-scope reuse) with its per-scope quota."""

    max_model_len: int
    pool_tokens: int
    num_pages: int
    page_size: int
    scrub: bool
    # Not compared: the disaggregated decode engine rebuilds its Capacity from the prefill worker's
    # handshake (disagg/engine.py) without them; its block manager was built from these values.
    prefix_cache_pages: int = 0
    prefix_cache_scope_pages: int = 0
    prefix_cache_flush_above_pages: int | None = None


def plan_capacity(
    *,
    max_position_embeddings: int,
    kv_bytes_per_token: int,
    page_size: int,
    max_model_len: int | Literal["auto"] | None,
    kv_cache_tokens: int | None,
    kv_cache_memory: int | None,
    available_memory: int,
    max_num_seqs: int,
    scrub: bool,
    prefix_cache_tokens: int | None = None,
    prefix_cache_scope_tokens: int | None = None,
) -> Capacity:
    """Size the pool, settle ``max_model_len`` (I3) and the prefix-cache budget (I6).

    ``available_memory`` is what the default pool may use (bytes) when neither ``kv_cache_tokens``
    nor ``kv_cache_memory`` is given; the default pool then holds ``max_num_seqs`` full-length
    requests, or as many tokens as that memory allows.

    ``prefix_cache_tokens`` (default: the pool minus one ``max_model_len`` request) is rounded down
    to whole pages; ``"auto"`` then lowers ``max_model_len`` to what the rest of the pool holds.
    ``prefix_cache_scope_tokens`` (default: an eighth of the budget) is each scope's guaranteed share.
    """
    if isinstance(max_model_len, int) and max_model_len > max_position_embeddings:
        raise ConfigError(
            f"max_model_len={max_model_len} is larger than the model's max_position_embeddings="
            f"{max_position_embeddings}; lower --max-model-len to at most {max_position_embeddings}"
        )
    wanted_len = max_model_len if isinstance(max_model_len, int) else max_position_embeddings
    if kv_cache_tokens is not None:
        num_pages = -(-kv_cache_tokens // page_size)
        source = f"--kv-cache-tokens={kv_cache_tokens}"
    elif kv_cache_memory is not None:
        num_pages = kv_cache_memory // (kv_bytes_per_token * page_size)
        source = f"--kv-cache-memory={kv_cache_memory} bytes"
    else:
        budget = min(available_memory, _DEFAULT_MEMORY_CAP)
        by_memory = budget // (kv_bytes_per_token * page_size)
        by_demand = -(-(max_num_seqs * wanted_len) // page_size)
        num_pages = min(by_memory, by_demand)
        source = f"the default pool ({budget >> 20} MiB budget)"
    if num_pages < 1:
        raise CapacityError(f"{source} does not hold a single page of {page_size} tokens; give the KV pool more room")
    pool_tokens = num_pages * page_size
    cache_pages = None if prefix_cache_tokens is None else prefix_cache_tokens // page_size
    if cache_pages is not None and cache_pages > num_pages:
        raise CapacityError(
            f"--prefix-cache-tokens={prefix_cache_tokens} is more than the KV pool holds ({pool_tokens} tokens, "
            f"from {source}); lower it or enlarge the pool"
        )
    room_tokens = pool_tokens - (cache_pages or 0) * page_size  # what running requests may use
    if max_model_len == "auto":
        resolved = min(max_position_embeddings, room_tokens)
        if resolved < 1:
            raise CapacityError(
                f"--prefix-cache-tokens={prefix_cache_tokens} takes the whole KV pool ({pool_tokens} tokens, from "
                f"{source}): no request could run. Lower it or enlarge the pool"
            )
    else:
        resolved = wanted_len
        if resolved > pool_tokens:
            what = "max_model_len" if max_model_len is not None else "the model's max_position_embeddings"
            raise CapacityError(
                f"{what} is {resolved} tokens but the KV pool holds only {pool_tokens} tokens "
                f"({num_pages} pages of {page_size}, from {source}): a request of full length could "
                f"never run. Lower --max-model-len to at most {pool_tokens}, use --max-model-len auto, "
                f"or enlarge the pool to at least {resolved} tokens with --kv-cache-tokens / --kv-cache-memory"
            )
        if resolved > room_tokens:
            max_cache = (num_pages - -(-resolved // page_size)) * page_size
            raise CapacityError(
                f"--prefix-cache-tokens={prefix_cache_tokens} leaves {room_tokens} of the KV pool's {pool_tokens} "
                f"tokens for running requests, but a request of max_model_len={resolved} needs {resolved}: one "
                f"scope's cached prefix pages never make room for another scope's request (I6), so it could "
                f"never run. Lower --prefix-cache-tokens to at most {max_cache}, lower --max-model-len, "
                f"or enlarge the pool with --kv-cache-tokens / --kv-cache-memory"
            )
    flush_above: int | None = None
    if cache_pages is None:
        default = default_cache_budget(num_pages, -(-resolved // page_size))
        cache_pages, flush_above = default.cache_pages, default.flush_above_pages
    scope_pages = _scope_pages(prefix_cache_scope_tokens, cache_pages, page_size)
    return Capacity(
        max_model_len=resolved, pool_tokens=pool_tokens, num_pages=num_pages, page_size=page_size, scrub=scrub,
        prefix_cache_pages=cache_pages, prefix_cache_scope_pages=scope_pages, prefix_cache_flush_above_pages=flush_above,
    )


def _scope_pages(scope_tokens: int | None, cache_pages: int, page_size: int) -> int:
    """The per-scope quota in pages: given (rounded down, within the budget) or 1/8 of the budget."""
    if scope_tokens is None:
        return default_scope_pages(cache_pages)
    scope_pages = scope_tokens // page_size
    if cache_pages and not 1 <= scope_pages <= cache_pages:
        raise ConfigError(
            f"--prefix-cache-scope-tokens={scope_tokens} must be between one page ({page_size} tokens) and the "
            f"prefix-cache budget ({cache_pages * page_size} tokens)"
        )
    return scope_pages
