"""The token vocabulary a grammar is matched against, built once per tokenizer.

llguidance reads the ``tokenizer.json`` of a Hugging Face fast tokenizer itself (its own helper, in
Rust, no ``transformers``): byte-level BPE (GPT-2, Llama 3, Qwen) maps the printable stand-in
characters back to bytes, SentencePiece with byte fallback maps ``<0x0A>`` to its byte and ``▁`` to
a space, and special tokens are kept out of the text a grammar sees. Tokenizers whose tokens are not
byte strings (WordPiece: ``##`` continuations, spaces invented by the decoder) are refused.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from kvfence.errors import InvalidParameterError

__all__ = ["Vocabulary", "vocabulary_of"]


@dataclass(frozen=True)
class Vocabulary:
    """An llguidance tokenizer plus the facts the logits processor needs."""

    llg_tokenizer: Any  # llguidance.LLTokenizer
    size: int  # tokens the grammar knows (the logits row may be longer: those tokens are never allowed)
    eos_token_ids: tuple[int, ...]


_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[Any, Vocabulary] = weakref.WeakKeyDictionary()


def vocabulary_of(tokenizer: Any) -> Vocabulary:
    """The vocabulary of a :class:`kvfence.engine.tokenizer.Tokenizer` (cached while it lives).

    Raises :class:`InvalidParameterError` when the tokenizer's tokens cannot be read as bytes.
    """
    with _lock:
        found = _cache.get(tokenizer)
        if found is None:
            found = _build(tokenizer)
            _cache[tokenizer] = found
        return found


def _build(tokenizer: Any) -> Vocabulary:
    import llguidance

    # The Tokenizer keeps its `tokenizers` backend private; llguidance needs its JSON form.
    backend = getattr(tokenizer, "_backend", tokenizer)
    to_str = getattr(backend, "to_str", None)
    if to_str is None:
        raise InvalidParameterError("structured outputs need a Hugging Face fast tokenizer (tokenizer.json)",
                                    param="response_format")
    eos = [int(t) for t in getattr(tokenizer, "eos_token_ids", [])]
    try:
        llg_tokenizer = llguidance.LLTokenizer(to_str(), eos_token=eos or None)
    except ValueError as exc:
        raise InvalidParameterError(
            "structured outputs are not supported for this model's tokenizer (they need byte-level BPE "
            f"or SentencePiece-style tokens): {exc}", param="response_format") from None
    return Vocabulary(llg_tokenizer, int(llg_tokenizer.vocab_size), tuple(int(t) for t in llg_tokenizer.eos_tokens))
