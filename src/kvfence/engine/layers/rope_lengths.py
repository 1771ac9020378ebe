"""Which sequence length each token is rotated for, where RoPE depends on it (dynamic NTK, LongRoPE).

transformers decides per forward call from the longest position in it and keeps the keys it cached
with the rotation they were computed with; so in one sequence's ``generate`` the token at position
``p`` of a prompt of ``P`` tokens is rotated for the length ``max(P, p + 1)``. Phi-3 adds one rule:
the first time a sequence grows past LongRoPE's ``original_max_position_embeddings`` its ``generate``
drops the cache and recomputes the whole sequence, so every token is then rotated for the length it
has at that step. A sequence's *rope length* (:attr:`~kvfence.engine.core.sequence.Sequence.rope_length`)
is that first forward call's length: its prompt's, or its length at the Phi-3 switch.

No torch here: the scheduler applies these rules (:class:`~kvfence.engine.core.scheduler.Scheduler`).
"""

from __future__ import annotations

from typing import Any

from kvfence.scope import is_unshared

__all__ = ["rope_length_threshold", "rope_lengths", "rope_scope_key", "rope_switch_length"]


def rope_length_threshold(scaling: dict[str, Any] | None, max_position_embeddings: int) -> int | None:
    """The sequence length past which transformers' RoPE depends on how long the sequence is, or ``None``.

    ``dynamic`` NTK recomputes its frequencies from the sequence length once it passes
    ``max_position_embeddings``; ``longrope`` switches from ``short_factor`` to ``long_factor`` once it
    passes ``original_max_position_embeddings``.
    """
    rope_type = (scaling or {}).get("rope_type")
    if rope_type == "dynamic":
        return max_position_embeddings
    if rope_type == "longrope" and scaling is not None:
        return int(scaling["original_max_position_embeddings"])
    return None


def rope_lengths(rope_length: int, start: int, end: int) -> range | list[int]:
    """The sequence length each position in ``[start, end)`` of a request is rotated for: its rope
    length (the prompt's, one prefill call in transformers) up to it, ``p + 1`` past it (one decode
    call each), so a recompute after preemption rotates every token as it was the first time."""
    if start + 1 >= rope_length:
        return range(start + 1, end + 1)
    return [max(rope_length, p + 1) for p in range(start, end)]


def rope_scope_key(scope_key: bytes, rope_length: int, threshold: int | None) -> bytes:
    """``scope_key`` narrowed to sequences of this rope length when it is past the RoPE length threshold.

    Past it every token up to the rope length is rotated for that length (:func:`rope_lengths`), so
    the KV of a page depends on that length as well as on its tokens: a page may then be a prefix hit
    (I1) only for a sequence of the same rope length. Shorter ones rotate by position alone and keep
    their scope. Per-request scopes share nothing anyway and are left as they are."""
    if threshold is None or rope_length <= threshold or is_unshared(scope_key):
        return scope_key
    return scope_key + b"|rope-length:" + str(rope_length).encode()


def rope_switch_length(rope_length: int, num_tokens: int, threshold: int) -> int | None:
    """Phi-3's switch: the rope length a sequence of ``num_tokens`` must now be recomputed for, or
    ``None`` when its KV stays valid (it has not grown past ``threshold``, or was rotated past it)."""
    if rope_length <= threshold < num_tokens:
        return num_tokens
    return None
