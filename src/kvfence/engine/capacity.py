"""KV pool sizing and the start-up half of admission (invariant I3). Pure logic, no torch.

The incident behind kvfence advertised a context window larger than its KV pool. Here the engine
refuses to start in that case, with both numbers and what to change, unless the operator asked for
``max_model_len="auto"``, which lowers the advertised maximum to what the pool holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvfence.errors import CapacityError, ConfigError

__all__ = ["Capacity", "plan_capacity"]

_DEFAULT_MEMORY_CAP = 4 << 30  # bytes: default pool at most 4 GiB unless asked for more


@dataclass(frozen=True)
class Capacity:
    """What the engine can hold: advertised context, pool size in tokens and pages, scrubbing on/off."""

    max_model_len: int
    pool_tokens: int
    num_pages: int
    page_size: int
    scrub: bool


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
) -> Capacity:
    """Size the pool and settle ``max_model_len`` (I3).

    ``available_memory`` is what the default pool may use (bytes) when neither ``kv_cache_tokens``
    nor ``kv_cache_memory`` is given; the default pool then holds ``max_num_seqs`` full-length
    requests, or as many tokens as that memory allows.
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
    if max_model_len == "auto":
        resolved = min(max_position_embeddings, pool_tokens)
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
    return Capacity(max_model_len=resolved, pool_tokens=pool_tokens, num_pages=num_pages, page_size=page_size, scrub=scrub)
