"""Tiny random Hugging Face checkpoints built by the tests themselves (no hub, no network)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from kvfence.engine.runner.default_model import _CHAT_TEMPLATE, BOS, EOT, _build_tokenizer

__all__ = ["build_tiny_model", "hf_greedy"]

_SHAPES: dict[str, dict[str, Any]] = {
    "llama": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2},
    "qwen2": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2},
    "mistral": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1},
    # head_dim explicit and unequal to hidden / heads, as in Qwen3-0.6B (1024 / 16 = 64, head_dim 128)
    "qwen3": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 32},
    # one global layer after two local ones, a window shorter than most prompts, a scalar unequal to head_dim
    "gemma3": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 16, "num_hidden_layers": 3, "sliding_window": 12, "query_pre_attn_scalar": 24,
               "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
               "pad_token_id": 0},
    "phi3": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
             "pad_token_id": 0},
}
_CONFIGS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "mistral": "MistralConfig", "qwen3": "Qwen3Config",
            "gemma3": "Gemma3TextConfig", "phi3": "Phi3Config"}
_MODELS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM",
           "qwen3": "Qwen3ForCausalLM", "gemma3": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM"}
# families whose norms the test randomises too (their q/k norms and Gemma's (1 + w) must be exercised)
_RANDOM_NORMS = ("qwen3", "gemma3", "phi3")


def build_tiny_model(
    out: Path, arch: str = "llama", *, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides: Any
) -> Path:
    """Save a random ``arch`` model with transformers' own ``save_pretrained`` plus a byte tokenizer."""
    import transformers

    config_cls = getattr(transformers, _CONFIGS[arch])
    tokenizer = _build_tokenizer()
    fields: dict[str, Any] = {
        "vocab_size": 272,
        "num_hidden_layers": 2,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "bos_token_id": tokenizer.token_to_id(BOS),
        "eos_token_id": tokenizer.token_to_id(EOT),
        "tie_word_embeddings": arch in ("qwen2", "gemma3"),
        **_SHAPES[arch],
        **overrides,
    }
    config = config_cls(**fields)
    torch.manual_seed(seed)
    model_cls = getattr(transformers, _MODELS[arch])
    model = model_cls(config).to(dtype)
    with torch.no_grad():  # larger-than-default weights, so logits are far from ties
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, (1.5 if config.tie_word_embeddings else 0.5) / p.shape[1] ** 0.5 if "embed" not in name else _embedding_std(arch, config.tie_word_embeddings))
            elif "bias" in name:
                p.normal_(0.0, 0.1)
            elif "norm" in name and arch in _RANDOM_NORMS:  # Gemma's norms scale by 1 + w: centre on 0
                p.normal_(0.0 if arch == "gemma3" else 1.0, 0.2)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOT, "chat_template": _CHAT_TEMPLATE}), encoding="utf-8"
    )
    return out


def _embedding_std(arch: str, tied: bool) -> float:
    if arch == "gemma3":  # its embeddings are scaled by sqrt(hidden): tied ones would echo the last token
        return 0.03 if tied else 0.125
    return 0.1 if tied else 1.0


def hf_greedy(model_dir: Path, prompts: list[list[int]], max_new_tokens: int, dtype: torch.dtype = torch.float32) -> list[list[int]]:
    """Greedy continuations from transformers' ``generate``, one prompt at a time (no padding)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    model.eval()
    results = []
    with torch.no_grad():
        for ids in prompts:
            input_ids = torch.tensor([ids])
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
            results.append(out[0, len(ids) :].tolist())
    return results
