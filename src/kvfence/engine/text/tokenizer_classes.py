"""What transformers 5 does to a ``tokenizer.json`` when it loads it, so kvfence's tokens equal ``AutoTokenizer``'s.

transformers 5 does not take ``tokenizer.json`` verbatim. A model-specific ``tokenizer_class`` in
``tokenizer_config.json`` keeps the file's vocabulary, merges and post-processor but rebuilds the
normalizer, pre-tokenizer and decoder its own way: a Llama-2 or Mistral ``tokenizer.json`` written
with the legacy ``Prepend("▁")`` normalizer is encoded with a ``Metaspace`` pre-tokenizer instead,
which differs on text after a special token and on text that starts with a space. The file's
post-processor is kept whatever ``add_bos_token`` / ``add_eos_token`` say (transformers 5.x reads
tokenizer.json's BOS/EOS rule, not those flags). vLLM tokenizes through transformers, so this is also
what a vLLM user's prompts turn into.

Only the classes of the architectures kvfence runs are mirrored (Llama, Qwen2, GPT-2 style, Gemma); any
other class, or none (``PreTrainedTokenizerFast`` / ``TokenizersBackend``), keeps the file's pipeline.
"""

from __future__ import annotations

import json
from typing import Any

from tokenizers import Regex, decoders, normalizers, pre_tokenizers
from tokenizers import Tokenizer as _HFTokenizer

__all__ = ["apply_tokenizer_class"]

# transformers' Qwen2Tokenizer pre-tokenisation pattern (the one Qwen2/2.5 checkpoints ship).
_QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


_SENTENCEPIECE = ("LlamaTokenizer", "GemmaTokenizer")
_MIRRORED = (*_SENTENCEPIECE, "Qwen2Tokenizer", "GPT2Tokenizer")


def apply_tokenizer_class(backend: _HFTokenizer, tok_cfg: dict[str, Any]) -> str | None:
    """Rebuild ``backend``'s normalizer, pre-tokenizer and decoder as ``tok_cfg["tokenizer_class"]`` does
    in transformers 5; returns the class mirrored, or ``None`` when the file's pipeline is kept."""
    name = str(tok_cfg.get("tokenizer_class") or "").removesuffix("Fast")
    if name not in _MIRRORED or _model_type(backend) != "BPE":
        return None
    # A class name that contradicts the file (a byte-level Llama-3 file labelled LlamaTokenizer, a
    # SentencePiece file labelled GPT2Tokenizer) would be rebuilt into a different tokenizer: the file wins.
    if _is_byte_level(backend) != (name not in _SENTENCEPIECE):
        return None
    add_prefix_space = tok_cfg.get("add_prefix_space")
    if name == "LlamaTokenizer":
        prefix = True if add_prefix_space is None else bool(add_prefix_space)
        legacy = bool(tok_cfg.get("legacy", False))
        scheme = ("always" if legacy else "first") if prefix else "never"
        backend.normalizer = None
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=False)
        steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        if prefix:
            steps.append(decoders.Strip(content=" ", left=1, right=0))
        backend.decoder = decoders.Sequence(steps)
    elif name == "GemmaTokenizer":  # spaces become "▁" and end the piece before them; no prefix space
        backend.normalizer = normalizers.Replace(" ", "\u2581")
        backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
        backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    elif name == "Qwen2Tokenizer":
        backend.normalizer = normalizers.NFC()
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=bool(add_prefix_space), use_regex=False),
        ])
        backend.decoder = decoders.ByteLevel()
    else:
        backend.normalizer = None
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(add_prefix_space))
        backend.decoder = decoders.ByteLevel()
    return name


def _is_byte_level(backend: _HFTokenizer) -> bool:
    """Whether the file's pre-tokenizer or decoder is GPT-2's byte-level one."""
    for part in (backend.pre_tokenizer, backend.decoder):
        if part is None:
            continue
        try:
            state = json.loads(part.__getstate__())
        except (TypeError, ValueError):
            continue
        steps = (state.get("pretokenizers") or state.get("decoders") or [state]) if isinstance(state, dict) else []
        if any(isinstance(step, dict) and step.get("type") == "ByteLevel" for step in steps):
            return True
    return False


def _model_type(backend: _HFTokenizer) -> str | None:
    try:
        state = json.loads(backend.model.__getstate__())
    except (TypeError, ValueError):
        return None
    return state.get("type") if isinstance(state, dict) else None
