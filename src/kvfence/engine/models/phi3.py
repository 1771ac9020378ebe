"""Phi-3: the Llama decoder, whose checkpoint already stores ``qkv_proj`` and ``gate_up_proj`` fused
(the loader copies them whole), with RoPE on the first ``partial_rotary_factor`` of each head where
the config sets one, and LongRoPE scaling (:mod:`kvfence.engine.layers.rotary`); a sequence that
grows past LongRoPE's switch is recomputed with the long factors by the scheduler, as transformers'
Phi-3 ``generate`` recomputes it (:mod:`kvfence.engine.layers.rope_lengths`).

With the whole head rotated a Phi-3 layer runs the fused CPU decode kernel as Llama's does; with
partial rotary it runs op by op (the kernel rotates whole heads).
"""

from __future__ import annotations

from kvfence.engine.models.llama import LlamaForCausalLM

__all__ = ["Phi3ForCausalLM"]


class Phi3ForCausalLM(LlamaForCausalLM):
    """``Phi3ForCausalLM``: the shared decoder; ``ModelConfig.rotary_dim`` sizes its RoPE tables."""
