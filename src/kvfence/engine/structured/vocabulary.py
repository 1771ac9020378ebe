"""The token vocabulary a grammar is matched against, built once per tokenizer.

llguidance reads the ``tokenizer.json`` of a Hugging Face fast tokenizer itself (its own helper, in
Rust, no ``transformers``): byte-level BPE (GPT-2, Llama 3, Qwen) maps the printable stand-in
characters back to bytes, SentencePiece with byte fallback maps ``<0x0A>`` to its byte and ``▁`` to
a space, and special tokens are kept out of the text a grammar sees. Its reading is checked token by
token against :meth:`Tokenizer.token_bytes`; where they differ (a ``Metaspace`` decoder, which
llguidance leaves as a literal ``▁``) or llguidance cannot read the file, the vocabulary is built
from ``token_bytes`` instead. Tokenizers whose tokens are not byte strings (WordPiece: ``##``
continuations, spaces invented by the decoder) are refused.
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


_PREFIX = "\n"
_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[Any, Vocabulary] = weakref.WeakKeyDictionary()


def vocabulary_of(tokenizer: Any) -> Vocabulary:
    """The vocabulary of a :class:`kvfence.engine.text.tokenizer.Tokenizer` (cached while it lives).

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

    # llguidance reads the `tokenizers` backend's JSON form (a bare backend works too).
    backend = getattr(tokenizer, "backend", tokenizer)
    to_str = getattr(backend, "to_str", None)
    if to_str is None:
        raise InvalidParameterError("structured outputs need a Hugging Face fast tokenizer (tokenizer.json)",
                                    param="response_format")
    eos = [int(t) for t in getattr(tokenizer, "eos_token_ids", [])]
    llg_tokenizer: Any
    try:
        llg_tokenizer = llguidance.LLTokenizer(to_str(), eos_token=eos or None)
        trusted = not _disagrees(llg_tokenizer, tokenizer)
        failure = "its tokens read differently from the model's own decoding"
    except ValueError as exc:
        llg_tokenizer, trusted, failure = None, False, str(exc)
    if not trusted:
        # llguidance's reader does not know every decoder (a Metaspace decoder keeps "▁" as is,
        # WordPiece is refused): rebuild from the bytes the model's tokenizer says each token is.
        llg_tokenizer = _from_token_bytes(tokenizer, eos)
        if llg_tokenizer is None:
            raise InvalidParameterError(
                "structured outputs are not supported for this model's tokenizer (they need byte-level BPE "
                f"or SentencePiece-style tokens): {failure}", param="response_format")
    return Vocabulary(llg_tokenizer, int(llg_tokenizer.vocab_size), tuple(int(t) for t in llg_tokenizer.eos_tokens))


def _disagrees(llg_tokenizer: Any, tokenizer: Any) -> bool:
    """Whether llguidance reads some ordinary token as other bytes than the tokenizer decodes it to."""
    token_bytes = getattr(tokenizer, "token_bytes", None)
    if token_bytes is None:
        return False
    for token_id in range(int(llg_tokenizer.vocab_size)):
        known = token_bytes(token_id)
        # 0xFF never occurs in UTF-8 text; llguidance uses it to mark special tokens.
        if known is None or known[:1] == b"\xff" or llg_tokenizer.is_special_token(token_id):
            continue
        if llg_tokenizer.decode_bytes([token_id]) != known:
            return True
    return False


def _from_token_bytes(tokenizer: Any, eos: list[int]) -> Any:
    """An LLTokenizer from :meth:`Tokenizer.token_bytes`, or None when some token has no known bytes."""
    import llguidance

    token_bytes = getattr(tokenizer, "token_bytes", None)
    if token_bytes is None or not eos:
        return None
    tokens: list[bytes] = []
    for token_id in range(int(tokenizer.vocab_size)):
        known = token_bytes(token_id)
        if known is None:
            return None
        tokens.append(known)
    special = sorted(getattr(tokenizer, "special_token_ids", ()))
    prefix_ids: list[int] = tokenizer.encode(_PREFIX, add_special_tokens=False)

    class _Source:
        eos_token_id = eos[0]
        bos_token_id = getattr(tokenizer, "bos_token_id", None)

        def __init__(self) -> None:
            self.tokens = tokens
            self.special_token_ids = special

        def __call__(self, text: str | bytes) -> list[int]:
            # llguidance tokenizes text the grammar forces; it must come out as it would mid-answer,
            # without the "▁" a SentencePiece tokenizer prepends at the start of a text. So encode
            # it after a newline and drop the newline's tokens.
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            ids: list[int] = tokenizer.encode(_PREFIX + text, add_special_tokens=False)
            if ids[: len(prefix_ids)] == prefix_ids:
                return ids[len(prefix_ids):]
            plain: list[int] = tokenizer.encode(text, add_special_tokens=False)
            return plain

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Source()), eos_token=eos)
