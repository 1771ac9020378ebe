"""The built-in default model: a small RANDOM-WEIGHT Llama with a byte-level tokenizer, built locally.

Its output is gibberish by design. It exists so that ``kvfence serve`` and ``kvfence generate`` run on
a fresh machine with no network: nothing is downloaded. It is built deterministically from a fixed
seed into ``$KVFENCE_HOME/models/`` (default ``~/.cache/kvfence/models/``) and labelled as random in
its ``config.json`` (``kvfence_random_weights``), its name and the engine's logs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

from kvfence.engine.config import kvfence_home

if TYPE_CHECKING:
    import torch

__all__ = ["DEFAULT_MODEL_NAME", "ensure_default_model"]

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "kvfence-builtin-random-llama"
_VERSION = 2  # bump when the recipe changes, so old builds are not reused
_SEED = 20260829

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
START_HEADER, END_HEADER, EOT = "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"
PAD = "<|pad|>"
_SPECIAL_TOKENS = [BOS, EOS, START_HEADER, END_HEADER, EOT, PAD]

_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for part in message['content'] %}{{ part['text'] | default('') }}{% endfor %}{% endif %}"
    "{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
}


def ensure_default_model(path: Path | None = None) -> Path:
    """Return the directory of the built-in random model, building it first if it is not there yet.

    The build is atomic (a temporary directory renamed into place), so concurrent callers are safe.
    """
    target = path or kvfence_home() / "models" / f"{DEFAULT_MODEL_NAME}-v{_VERSION}"
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log.warning("building the built-in RANDOM-WEIGHT model %s in %s (output is gibberish)", DEFAULT_MODEL_NAME, target)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        _build(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first: keep its build
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _build(out: Path) -> None:
    tokenizer = _build_tokenizer()
    tokenizer.save(str(out / "tokenizer.json"))
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    bos_id, eos_id, eot_id = (tokenizer.token_to_id(t) for t in (BOS, EOS, EOT))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "kvfence_model_name": DEFAULT_MODEL_NAME,
        "kvfence_random_weights": True,
        "kvfence_note": "RANDOM WEIGHTS built by kvfence for offline use; output is gibberish by design.",
        "vocab_size": vocab_size,
        **_SHAPE,
        "head_dim": _SHAPE["hidden_size"] // _SHAPE["num_attention_heads"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos_id,
        "eos_token_id": [eos_id, eot_id],
        "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": bos_id, "eos_token_id": [eos_id, eot_id]}, indent=2) + "\n", encoding="utf-8"
    )
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "pad_token": PAD,
        "model_max_length": _SHAPE["max_position_embeddings"],
        "chat_template": _CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n", encoding="utf-8")
    from safetensors.torch import save_file  # torch only to build it, once: serving it needs no torch

    save_file(_random_weights(vocab_size), str(out / "model.safetensors"), metadata={"format": "pt"})


def _random_weights(vocab_size: int) -> dict[str, torch.Tensor]:
    import torch

    gen = torch.Generator().manual_seed(_SEED)
    hidden, inter = _SHAPE["hidden_size"], _SHAPE["intermediate_size"]
    head_dim = hidden // _SHAPE["num_attention_heads"]
    kv_dim = _SHAPE["num_key_value_heads"] * head_dim

    def normal(rows: int, cols: int, scale: float = 1.5) -> torch.Tensor:
        # Larger than a trained model's init, so greedy decoding wanders instead of repeating.
        return torch.randn(rows, cols, generator=gen) * (scale / cols**0.5)

    weights = {"model.embed_tokens.weight": torch.randn(vocab_size, hidden, generator=gen) * 0.1}
    for i in range(_SHAPE["num_hidden_layers"]):
        p = f"model.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": torch.ones(hidden),
            p + "post_attention_layernorm.weight": torch.ones(hidden),
            p + "self_attn.q_proj.weight": normal(hidden, hidden),
            p + "self_attn.k_proj.weight": normal(kv_dim, hidden),
            p + "self_attn.v_proj.weight": normal(kv_dim, hidden),
            p + "self_attn.o_proj.weight": normal(hidden, hidden),
            p + "mlp.gate_proj.weight": normal(inter, hidden),
            p + "mlp.up_proj.weight": normal(inter, hidden),
            p + "mlp.down_proj.weight": normal(hidden, inter),
        }
    weights["model.norm.weight"] = torch.ones(hidden)
    return {name: t.contiguous() for name, t in weights.items()}


def _bytes_to_unicode() -> dict[int, str]:
    """The byte-to-printable-character map of byte-level BPE, so token id ``b`` is byte ``b``."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _build_tokenizer() -> Tokenizer:
    vocab = {char: byte for byte, char in _bytes_to_unicode().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(_SPECIAL_TOKENS)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tokenizer
