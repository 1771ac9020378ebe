"""Which pool positions a token attends to: causal, or causal within a sliding window.

A windowed layer (transformers' ``sliding_window_overlay``) lets the query at position ``q`` see the
keys at positions ``k`` with ``q - window < k <= q``: the last ``window`` tokens, itself included. A
model may window only some of its layers (Qwen2's ``layer_types``), so the runner builds these masks
once per distinct window in a step and hands each layer the set that belongs to it.
"""

from __future__ import annotations

import torch

__all__ = ["decode_visibility", "prefill_mask", "window_binds"]


def window_binds(context_len: int, window: int | None) -> bool:
    """Whether a window hides anything from a query whose context is ``context_len`` tokens long."""
    return window is not None and context_len > window


def decode_visibility(lengths: torch.Tensor, max_len: int, window: int | None) -> torch.Tensor:
    """``[B, max_len]`` bool: position ``p`` of row ``b`` is visible to that row's decode token (at
    position ``lengths[b] - 1``). Causal, and within ``window`` where it binds."""
    pos = torch.arange(max_len, device=lengths.device)
    visible = pos[None, :] < lengths[:, None]
    if window is not None and max_len > window:
        visible &= pos[None, :] > (lengths[:, None] - 1 - window)
    return visible


def prefill_mask(start: int, context_len: int, window: int | None, device: torch.device) -> torch.Tensor | None:
    """``[1, 1, n, context_len]`` bool mask of a prefill chunk at positions ``[start, context_len)`` over
    the keys of positions ``[0, context_len)``; ``None`` when plain causal attention over the chunk's
    own keys is the same (a chunk from position 0 that no window binds)."""
    windowed = window_binds(context_len, window)
    if start == 0 and not windowed:
        return None
    q_pos = torch.arange(start, context_len, device=device)[:, None]
    k_pos = torch.arange(context_len, device=device)[None, :]
    allowed = k_pos <= q_pos
    if windowed and window is not None:
        allowed &= k_pos > q_pos - window
    return allowed[None, None]
