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
}


def build_tiny_model(
    out: Path, arch: str = "llama", *, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides: Any
) -> Path:
    """Save a random ``arch`` model with transformers' own ``save_pretrained`` plus a byte tokenizer."""
    import transformers

    config_cls = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "mistral": transformers.MistralConfig,
    }[arch]
    tokenizer = _build_tokenizer()
    fields: dict[str, Any] = {
        "vocab_size": 272,
        "num_hidden_layers": 2,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "bos_token_id": tokenizer.token_to_id(BOS),
        "eos_token_id": tokenizer.token_to_id(EOT),
        "tie_word_embeddings": arch == "qwen2",
        **_SHAPES[arch],
        **overrides,
    }
    config = config_cls(**fields)
    torch.manual_seed(seed)
    model_cls = {
        "llama": transformers.LlamaForCausalLM,
        "qwen2": transformers.Qwen2ForCausalLM,
        "mistral": transformers.MistralForCausalLM,
    }[arch]
    model = model_cls(config).to(dtype)
    with torch.no_grad():  # larger-than-default weights, so logits are far from ties
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, (1.5 if config.tie_word_embeddings else 0.5) / p.shape[1] ** 0.5 if "embed" not in name else (0.1 if config.tie_word_embeddings else 1.0))
            elif "bias" in name:
                p.normal_(0.0, 0.1)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOT, "chat_template": _CHAT_TEMPLATE}), encoding="utf-8"
    )
    return out


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
