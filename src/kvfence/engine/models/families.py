"""What each supported architecture reads from ``config.json`` beyond the fields every family shares.

One :class:`Family` per architecture: its defaults (transformers' config-class defaults that a
``config.json`` may leave out), and a reader that turns the family's own fields into
:class:`~kvfence.engine.config.ModelConfig` values or rejects them with a :class:`ModelLoadError`
naming the field. The torch model class is named, not imported, so reading a config loads no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvfence.errors import ModelLoadError

__all__ = ["ACTIVATIONS", "FAMILIES", "UNSUPPORTED_HINTS", "Family", "windowed_layers"]

log = logging.getLogger(__name__)

# hidden_act / hidden_activation values the MLPs implement, as transformers' ACT2FN names them
ACTIVATIONS = ("silu", "swish", "gelu_pytorch_tanh", "gelu")

Fields = dict[str, Any]


@dataclass(frozen=True)
class Family:
    """One architecture: where its model class lives and how its ``config.json`` is read."""

    architecture: str
    model_class: str  # "module:Class", imported by the loader
    read: Callable[[dict[str, Any]], Fields]
    defaults: Fields = field(default_factory=dict)
    partial_rotary: bool = False  # whether partial_rotary_factor < 1 is implemented


def windowed_layers(raw: dict[str, Any], window: int | None) -> tuple[int | None, frozenset[int]]:
    """``(sliding_window, full_attention_layers)`` from ``layer_types`` (layers not marked
    ``sliding_attention`` attend over the whole context); ``(None, {})`` when no layer is windowed."""
    num_layers = int(raw["num_hidden_layers"])
    layer_types = raw["layer_types"]
    if window is None or not isinstance(layer_types, list) or len(layer_types) != num_layers:
        return None, frozenset()
    full = frozenset(i for i, kind in enumerate(layer_types) if kind != "sliding_attention")
    if len(full) == num_layers:
        return None, frozenset()
    if full:
        log.info("layers %s attend over a sliding window of %d tokens, layers %s over the whole context",
                 _ranges(sorted(set(range(num_layers)) - full)), window, _ranges(sorted(full)))
    return int(window), full


def _no_window(raw: dict[str, Any]) -> Fields:
    return {"sliding_window": None, "full_attention_layers": frozenset()}


def _every_layer_windowed(raw: dict[str, Any]) -> Fields:
    window = raw.get("sliding_window")
    return {"sliding_window": None if window is None else int(window), "full_attention_layers": frozenset()}


def _qwen_windows(raw: dict[str, Any]) -> Fields:
    """Qwen2 / Qwen3: windowed only with ``use_sliding_window``, then only the layers ``layer_types``
    marks ``sliding_attention`` (by default those from ``max_window_layers`` on)."""
    window = raw.get("sliding_window")
    if window is None or not raw.get("use_sliding_window", False):
        return _no_window(raw)
    num_layers = int(raw["num_hidden_layers"])
    layer_types = raw.get("layer_types")
    if not isinstance(layer_types, list) or len(layer_types) != num_layers:
        first = int(raw.get("max_window_layers", num_layers))
        layer_types = ["sliding_attention" if i >= first else "full_attention" for i in range(num_layers)]
    window, full = windowed_layers({**raw, "layer_types": layer_types}, int(window))
    return {"sliding_window": window, "full_attention_layers": full}


def _qwen2(raw: dict[str, Any]) -> Fields:
    return {**_qwen_windows(raw), "attention_bias": True}  # Qwen2 always has q/k/v biases; config.json does not say


def _qwen3(raw: dict[str, Any]) -> Fields:
    return {**_qwen_windows(raw), "qk_norm": True}


def _phi3(raw: dict[str, Any]) -> Fields:
    """Phi-3: a window on every layer where set; ``su`` / ``yarn`` are older names of its LongRoPE.

    As transformers' Phi3Config does, the top-level ``original_max_position_embeddings`` (default
    4096) is LongRoPE's threshold, over one in ``rope_parameters``; and as its ``generate`` does, a
    sequence that first grows past it is recomputed with the long factors (``recompute_at_rope_switch``).
    """
    fields = _every_layer_windowed(raw)
    params = raw.get("rope_parameters") or raw.get("rope_scaling")
    if isinstance(params, dict) and (params.get("rope_type") or params.get("type")) in ("su", "yarn", "longrope"):
        original = int(raw["original_max_position_embeddings"])
        fields["rope_parameters"] = {**params, "rope_type": "longrope", "original_max_position_embeddings": original}
        fields["recompute_at_rope_switch"] = True
    return fields


def _gemma3(raw: dict[str, Any]) -> Fields:
    """Gemma 3 text: interleaved sliding/global layers with their own RoPE, q/k norms, ``(1 + w)``
    norms, embeddings scaled by sqrt(hidden), attention scaled by ``query_pre_attn_scalar``."""
    for name in ("attn_logit_softcapping",):
        if raw.get(name) is not None:
            raise ModelLoadError(f"{name}={raw[name]} is not supported: kvfence's attention does not soft-cap "
                                 "scores (Gemma 3 checkpoints leave it null)")
    if raw.get("use_bidirectional_attention"):
        raise ModelLoadError("use_bidirectional_attention=true is not supported: kvfence generates causally "
                             "(that setting is for Gemma 3 embedding models)")
    num_layers = int(raw["num_hidden_layers"])
    layer_types = raw.get("layer_types")
    if not isinstance(layer_types, list) or len(layer_types) != num_layers:
        pattern = int(raw.get("sliding_window_pattern") or raw.get("_sliding_window_pattern") or 6)
        layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
    if raw.get("sliding_window") is None and "sliding_attention" in layer_types:
        raise ModelLoadError("sliding_window is null but layer_types marks sliding_attention layers: set the "
                             "window (Gemma 3 checkpoints state it) or mark every layer full_attention")
    window, full = windowed_layers({**raw, "layer_types": layer_types}, raw.get("sliding_window"))
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get("sliding_attention"), dict):
        local = params["sliding_attention"]
        global_params = params.get("full_attention") or {}
    else:  # transformers 4: rope_theta / rope_scaling for global layers, rope_local_base_freq for local ones
        local = {"rope_theta": raw.get("rope_local_base_freq", 10_000.0), "rope_type": "default"}
        global_params = {**(raw.get("rope_scaling") or {}), "rope_theta": raw.get("rope_theta", 1_000_000.0)}
    local_type = local.get("rope_type") or local.get("type") or "default"
    if local_type in ("dynamic", "longrope"):
        raise ModelLoadError(f"rope_parameters.sliding_attention.rope_type={local_type!r} is not supported: "
                             "kvfence rotates Gemma 3's local layers by position only")
    activation = raw.get("hidden_activation") or raw.get("hidden_act") or "gelu_pytorch_tanh"
    softcap = raw.get("final_logit_softcapping")
    return {
        "sliding_window": window,
        "full_attention_layers": full,
        "qk_norm": True,
        "attention_scale": float(raw.get("query_pre_attn_scalar", 256)) ** -0.5,
        "final_logit_softcapping": None if softcap is None else float(softcap),
        "hidden_act": str(activation),
        # the global layers' RoPE is the model's (rope_theta / rope_scaling); the local layers' is extra
        "rope_parameters": {"rope_theta": 1_000_000.0, **global_params},
        "local_rope_theta": float(local.get("rope_theta", 10_000.0)),
        "local_rope_scaling": None if local_type == "default" else {**local, "rope_type": local_type},
        # Gemma 3's max_position_embeddings (131072) already counts its global RoPE factor (8)
        "context_stretched_by_rope": False,
    }


FAMILIES: dict[str, Family] = {
    f.architecture: f
    for f in (
        Family("LlamaForCausalLM", "kvfence.engine.models.llama:LlamaForCausalLM", _no_window),
        Family("MistralForCausalLM", "kvfence.engine.models.llama:LlamaForCausalLM", _every_layer_windowed),
        Family("Qwen2ForCausalLM", "kvfence.engine.models.llama:LlamaForCausalLM", _qwen2),
        Family("Qwen3ForCausalLM", "kvfence.engine.models.qwen3:Qwen3ForCausalLM", _qwen3,
               defaults={"max_position_embeddings": 32_768}),
        Family("Phi3ForCausalLM", "kvfence.engine.models.phi3:Phi3ForCausalLM", _phi3, partial_rotary=True,
               defaults={"rms_norm_eps": 1e-5, "max_position_embeddings": 4096,
                         "original_max_position_embeddings": 4096}),
        Family(
            "Gemma3ForCausalLM", "kvfence.engine.models.gemma3:Gemma3ForCausalLM", _gemma3,
            # Gemma3TextConfig's defaults, which differ from the other families'
            defaults={"head_dim": 256, "tie_word_embeddings": True, "max_position_embeddings": 131_072,
                      "sliding_window": 4096, "query_pre_attn_scalar": 256},
        ),
    )
}


# what to run instead, for architectures close to a supported one
UNSUPPORTED_HINTS = {
    "Gemma3ForConditionalGeneration": "the multimodal Gemma 3 checkpoints are not supported: serve a text-only "
                                      "Gemma3ForCausalLM export (gemma-3-1b is one)",
    "Qwen3MoeForCausalLM": "Qwen3's mixture-of-experts models are not supported: serve a dense Qwen3ForCausalLM",
}


def _ranges(indices: list[int]) -> str:
    parts: list[str] = []
    start = prev = indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)
