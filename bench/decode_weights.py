"""The weight products of one decode step of the bench's SmolLM-135M-shaped model, as random tensors.

Shared by the kernel benches that time products alone (``kernel_ab.py``, ``product_forms.py``): per
layer the fused qkv, o, fused gate/up and down weights, then the LM head, ``[out, in]`` as a
checkpoint stores them (538 MB of float32 in all).
"""

from __future__ import annotations

import torch

__all__ = ["HIDDEN", "INTERMEDIATE", "LAYERS", "VOCAB", "decode_step_weights"]

HIDDEN, INTERMEDIATE, VOCAB, LAYERS = 576, 1536, 49152, 30
KV_WIDTH = 384  # 2 x 3 KV heads x 64


def decode_step_weights(gen: torch.Generator) -> list[torch.Tensor]:
    """Every weight one decode step reads, in the order the step reads them."""
    weights = []
    for _ in range(LAYERS):
        weights += [torch.randn(HIDDEN + KV_WIDTH, HIDDEN, generator=gen), torch.randn(HIDDEN, HIDDEN, generator=gen),
                    torch.randn(2 * INTERMEDIATE, HIDDEN, generator=gen), torch.randn(HIDDEN, INTERMEDIATE, generator=gen)]
    weights.append(torch.randn(VOCAB, HIDDEN, generator=gen))
    return weights
