"""The tokenizer of a local model directory: ``tokenizer.json`` plus its chat template, no hub access."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import jinja2
from tokenizers import Tokenizer as _HFTokenizer

from kvfence.engine.text.chat_template import (
    ContentFormat,
    TemplateRejected,
    compile_chat_template,
    content_format,
)
from kvfence.engine.text.tokenizer_classes import apply_tokenizer_class
from kvfence.errors import InvalidParameterError, ModelLoadError

__all__ = ["Tokenizer"]

log = logging.getLogger(__name__)


class Tokenizer:
    """Encode, decode and render chat prompts for one model.

    ``eos_token_ids`` merges every end-of-sequence id the directory declares (``generation_config.json``,
    ``config.json`` and the tokenizer's own ``eos_token``), since chat models often stop on more than one.
    """

    def __init__(
        self,
        backend: _HFTokenizer,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        chat_template: str | None = None,
        named_chat_templates: dict[str, str] | None = None,
        add_bos_token: bool = False,
        extra_eos_token_ids: list[int] | None = None,
    ) -> None:
        self._backend = backend
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.bos_token_id = backend.token_to_id(bos_token) if bos_token else None
        eos_ids: list[int] = []
        if eos_token and (tid := backend.token_to_id(eos_token)) is not None:
            eos_ids.append(tid)
        for tid in extra_eos_token_ids or []:
            if tid not in eos_ids:
                eos_ids.append(tid)
        self.eos_token_ids = eos_ids
        self.chat_template = chat_template
        # Extra templates by name; "tool_use" renders a request that has tools, as in transformers.
        self._named_templates = dict(named_chat_templates or {})
        self._compiled_named: dict[str, jinja2.Template] = {}
        self._add_bos_token = add_bos_token and self.bos_token_id is not None
        self._compiled_template: jinja2.Template | None = None
        self._content_format: ContentFormat | None = None
        self._byte_level = _decoder_has(backend, "ByteLevel")
        # SentencePiece-style pieces spell a space as U+2581 ("▁") and bytes as <0xNN>.
        self._sentencepiece = _decoder_has(backend, "Metaspace") or _decoder_has(backend, "ByteFallback")
        self._special_ids = {tid for tid, t in backend.get_added_tokens_decoder().items() if t.special}

    @classmethod
    def from_dir(cls, model_dir: Path, *, extra_eos_token_ids: list[int] | None = None) -> Tokenizer:
        """Load ``tokenizer.json`` (required), ``tokenizer_config.json`` / ``special_tokens_map.json`` and
        the chat template (``chat_template.jinja`` or ``tokenizer_config.json``)."""
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise ModelLoadError(_missing_tokenizer_message(model_dir))
        try:
            backend = _HFTokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises plain Exception subclasses
            raise ModelLoadError(f"cannot load {path}: {exc}") from exc
        tok_cfg = _read_json(model_dir / "tokenizer_config.json")
        # Older checkpoints name bos/eos only in special_tokens_map.json, which transformers reads too.
        special_map = _read_json(model_dir / "special_tokens_map.json")
        for name in ("bos_token", "eos_token"):
            if tok_cfg.get(name) is None and special_map.get(name) is not None:
                tok_cfg[name] = special_map[name]
        # transformers 5 rebuilds parts of the pipeline per tokenizer_class; doing the same keeps a
        # prompt's tokens equal to AutoTokenizer's (and so to vLLM's).
        apply_tokenizer_class(backend, tok_cfg)
        bos_token, eos_token = _token_text(tok_cfg.get("bos_token")), _token_text(tok_cfg.get("eos_token"))
        gen_cfg = _read_json(model_dir / "generation_config.json")
        template, named = _chat_templates(model_dir, tok_cfg)
        eos = list(extra_eos_token_ids or [])
        gen_eos = gen_cfg.get("eos_token_id")
        for tid in gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else []:
            if int(tid) not in eos:
                eos.append(int(tid))
        return cls(
            backend,
            bos_token=bos_token,
            eos_token=eos_token,
            chat_template=template,  # BOS/EOS: tokenizer.json's post-processor, as in transformers 5
            named_chat_templates=named,
            extra_eos_token_ids=eos,
        )

    @property
    def chat_template_content_format(self) -> ContentFormat:
        """How messages' content parts reach the template: ``"openai"`` (the list of parts as sent) for a
        template that iterates over them, else ``"string"`` (their texts joined by newlines, as vLLM)."""
        if self._content_format is None:
            self._content_format = content_format(self.chat_template)
        return self._content_format

    @property
    def backend(self) -> _HFTokenizer:
        """The ``tokenizers.Tokenizer`` read from tokenizer.json (for libraries that need its JSON form)."""
        return self._backend

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Ids of the added tokens marked special (BOS, EOS, chat markers...)."""
        return frozenset(self._special_ids)

    @property
    def vocab_size(self) -> int:
        return int(self._backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens`` the model's BOS is prepended if it uses one."""
        ids: list[int] = self._backend.encode(text, add_special_tokens=add_special_tokens).ids
        bos = self.bos_token_id
        if add_special_tokens and self._add_bos_token and bos is not None and (not ids or ids[0] != bos):
            ids = [bos, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return str(self._backend.decode(ids, skip_special_tokens=skip_special_tokens))

    def token_bytes(self, token_id: int) -> bytes | None:
        """The raw bytes one token stands for, or None when the tokenizer does not say.

        Known for byte tokens (SentencePiece byte fallback ``<0xE4>``) and pieces, for byte-level
        BPE (GPT-2's printable-byte alphabet) and for special tokens; this is what the OpenAI
        ``logprobs.bytes`` field carries for a token that holds only part of a character.
        """
        piece = self._backend.id_to_token(token_id)
        if piece is None:
            return None
        if token_id in self._special_ids:
            return piece.encode("utf-8")
        if (m := _BYTE_TOKEN.fullmatch(piece)) is not None:
            return bytes([int(m.group(1), 16)])
        if self._byte_level and all(ch in _UNICODE_TO_BYTE for ch in piece):
            return bytes(_UNICODE_TO_BYTE[ch] for ch in piece)
        if self._sentencepiece:
            return piece.replace("\u2581", " ").encode("utf-8")
        return None

    def token_text(self, token_id: int) -> str:
        """The text one token adds to the output, leading space included, as logprobs' ``token``.

        ``decode([id])`` drops a SentencePiece token's leading space (the decoder strips the start
        of a text), so the tokens of an answer would not join to its text; the token's own bytes
        do (a part of a character shows as U+FFFD, as in ``bytes``).
        """
        raw = self.token_bytes(token_id)
        if raw is None:
            return self.decode([token_id], skip_special_tokens=False)
        return raw.decode("utf-8", errors="replace")

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        *,
        continue_final_message: bool = False,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """Render ``messages`` with the model's Jinja2 chat template, in a sandbox.

        The result already holds the template's special tokens: encode it with
        ``add_special_tokens=False``. Without a template a plain ``role: content`` format is used.
        ``template_kwargs`` are extra template variables (e.g. Qwen3's ``enable_thinking``);
        ``continue_final_message`` ends the prompt right after the last message's text, so the
        model continues it (a prefilled answer) instead of closing it.
        A template that rejects the messages raises :class:`InvalidParameterError`.
        """
        if continue_final_message and add_generation_prompt:
            raise InvalidParameterError("continue_final_message and add_generation_prompt exclude each other: "
                                        "send add_generation_prompt: false", param="continue_final_message")
        text = self._render(messages, add_generation_prompt, template_kwargs or {})
        return _cut_after_final_message(text, messages) if continue_final_message else text

    def _template_for(self, default: str, extra: dict[str, Any]) -> jinja2.Template:
        """The compiled template for a request: the ``tool_use`` one when it has tools and the model
        names one, else ``default`` (transformers' choice)."""
        if extra.get("tools") and "tool_use" in self._named_templates:
            if "tool_use" not in self._compiled_named:
                self._compiled_named["tool_use"] = compile_chat_template(self._named_templates["tool_use"])
            return self._compiled_named["tool_use"]
        if self._compiled_template is None:
            self._compiled_template = compile_chat_template(default)
        return self._compiled_template

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, extra: dict[str, Any]) -> str:
        if self.chat_template is None:
            lines = [f"{m.get('role', 'user')}: {_content_text(m.get('content'))}" for m in messages]
            if add_generation_prompt:
                lines.append("assistant:")
            return "\n".join(lines)
        compiled = self._template_for(self.chat_template, extra)
        try:
            return compiled.render(
                {"tools": None, **extra},
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
            )
        except TemplateRejected as exc:
            raise InvalidParameterError(f"chat template rejected the messages: {exc}", param="messages") from exc
        except jinja2.TemplateError as exc:
            raise InvalidParameterError(f"cannot render the chat template: {exc}", param="messages") from exc


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _gpt2_byte_alphabet() -> dict[str, int]:
    """GPT-2's map from the printable stand-in characters of byte-level BPE back to bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


_UNICODE_TO_BYTE = _gpt2_byte_alphabet()


def _decoder_has(backend: _HFTokenizer, kind: str) -> bool:
    decoder = backend.decoder
    if decoder is None:
        return False
    try:
        state = json.loads(decoder.__getstate__())
    except (TypeError, ValueError):
        return False
    parts = state.get("decoders", [state]) if isinstance(state, dict) else []
    return any(isinstance(p, dict) and p.get("type") == kind for p in parts)


def _chat_templates(model_dir: Path, tok_cfg: dict[str, Any]) -> tuple[str | None, dict[str, str]]:
    """The default chat template and the named ones, where transformers 5 looks: ``chat_template.jinja``
    and ``additional_chat_templates/NAME.jinja`` (what it saves), else ``tokenizer_config.json``'s
    ``chat_template``, a string or a list of ``{"name", "template"}``."""
    named: dict[str, str] = {}
    extra_dir = model_dir / "additional_chat_templates"
    if extra_dir.is_dir():
        named = {f.stem: f.read_text(encoding="utf-8") for f in sorted(extra_dir.glob("*.jinja"))}
    template = tok_cfg.get("chat_template")
    if isinstance(template, list):
        listed = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        named = {**{k: v for k, v in listed.items() if isinstance(k, str) and isinstance(v, str)}, **named}
        template = None
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.is_file():
        template = jinja_file.read_text(encoding="utf-8")
    if not isinstance(template, str):
        template = named.pop("default", None) or next(iter(named.values()), None)
    return template, named


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _cut_after_final_message(text: str, messages: list[dict[str, Any]]) -> str:
    """``text`` up to the end of the last message's content (what the template closes it with is dropped)."""
    content = messages[-1].get("content") if messages else None
    final = _content_text(content)
    needles = [final, final.strip()]
    if isinstance(content, list) and content:  # a template that renders the parts itself: its last text
        needles += [_content_text(content[-1:]), _content_text(content[-1:]).strip()]
    for needle in needles:
        end = text.rfind(needle) if needle else -1
        if end >= 0:
            return text[: end + len(needle)]
    raise InvalidParameterError("continue_final_message: the chat template does not render the last message's "
                                "text, so there is nothing to continue", param="continue_final_message")


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts, joined by newlines as vLLM joins them
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    return "" if content is None else str(content)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


# Files of tokenizers kvfence cannot read itself, which transformers converts to tokenizer.json.
_SLOW_TOKENIZER_FILES = ("tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "tokenizer.tiktoken")


def _missing_tokenizer_message(model_dir: Path) -> str:
    """Why a model directory without ``tokenizer.json`` cannot be served, and what to do about it.

    kvfence has no token-ids-only mode (vLLM's ``skip_tokenizer_init``): stop strings, chat templates,
    streamed text and the server's token accounting all read the tokenizer, so the engine refuses to
    start rather than answer with empty texts."""
    slow = [name for name in _SLOW_TOKENIZER_FILES if (model_dir / name).is_file()]
    if slow:
        fix = (f"it has {', '.join(slow)}, which kvfence does not read: save a fast tokenizer next to the "
               f"weights with transformers (AutoTokenizer.from_pretrained(dir).save_pretrained(dir))")
    else:
        fix = ("it holds a config and weights but no tokenizer at all: copy tokenizer.json and "
               "tokenizer_config.json from the model this checkpoint was trained or fine-tuned from")
    return (f"model directory {str(model_dir)!r} has no tokenizer.json: {fix}. kvfence has no "
            "token-ids-only mode (like vLLM's skip_tokenizer_init); every engine needs the tokenizer")
