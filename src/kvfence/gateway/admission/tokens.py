"""Counting prompt tokens: with the backend's own tokenizer when it is on disk, else a stated bound.

The exact path loads ``tokenizer.json`` with the ``tokenizers`` library and, when the directory's
``tokenizer_config.json`` carries a chat template, renders chat requests through it exactly as the
backend will. Without a tokenizer the gateway uses a *conservative approximation*: one token per 3
UTF-8 bytes plus a per-message overhead. Real BPE vocabularies average about 4 bytes per token on
English and about 3 on CJK text, so the approximation over-counts: it may refuse a prompt that would
just have fitted, but it never lets an over-length one through to a backend that cannot hold it.
Each image or audio part is charged ``PER_MEDIA_PART`` tokens by the approximation (the exact path
counts text only: media token costs depend on the backend's processor).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from kvfence.errors import ConfigError

__all__ = ["ApproximateCounter", "TokenCounter", "TokenizerCounter", "load_counter", "media_parts", "message_text"]

PER_MESSAGE_OVERHEAD = 4   # role markers and separators of common chat templates
PER_REQUEST_OVERHEAD = 3   # the generation prompt
# A non-text content part (image, audio) costs the backend tokens we cannot count without its
# processor; the approximation charges a high typical figure (vision encoders use ~256-1,100).
PER_MEDIA_PART = 1024


def media_parts(content: Any) -> int:
    """Number of non-text parts (images, audio, files) in a message's ``content``."""
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if isinstance(part, dict) and part.get("type") not in (None, "text"))


def message_calls(message: dict[str, Any]) -> str:
    """The calls an assistant message makes, as the text the backend is sent: ``tool_calls`` and the
    deprecated single ``function_call`` (both reach the model; an uncounted one is a way past the cap)."""
    calls = [message[key] for key in ("tool_calls", "function_call") if message.get(key)]
    return json.dumps(calls) if calls else ""


def message_text(content: Any) -> str:
    """The text of a chat message's ``content``: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return json.dumps(content)


class TokenCounter(Protocol):
    is_exact: bool

    def count_text(self, text: str) -> int: ...

    def count_chat(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> int: ...


class ApproximateCounter:
    """Over-counting bound (see module docstring): ceil(UTF-8 bytes / 3) per text."""

    is_exact = False
    description = "approximation: ceil(utf8_bytes/3) + 4 per message (over-counts)"

    def count_text(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8")) / 3)

    def count_chat(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> int:
        return _sum_of_parts(self.count_text, messages, tools)


class TokenizerCounter:
    """Exact counts with a local ``tokenizer.json`` (and chat template when the directory has one)."""

    is_exact = True

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        file = path if path.is_file() else path / "tokenizer.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises a bare Exception on bad files
            raise ConfigError(f"cannot load tokenizer {file}: {exc}") from exc
        self.description = "tokenizer"  # shown on /health: no file path
        self._template: Any = None
        self._specials: dict[str, str] = {}
        config_file = file.parent / "tokenizer_config.json"
        if config_file.is_file():
            self._load_template(config_file)

    def _load_template(self, config_file: Path) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {config_file}: {exc}") from exc
        template = config.get("chat_template")
        jinja_file = config_file.parent / "chat_template.jinja"  # newer Hugging Face layout
        if jinja_file.is_file():
            template = jinja_file.read_text(encoding="utf-8")
        if isinstance(template, list):  # named templates: take the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        for key in ("bos_token", "eos_token"):
            value = config.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                self._specials[key] = value
        if isinstance(template, str):
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise_template_error
            self._template = env.from_string(template)
            self.description += " with chat template"

    def count_text(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_chat(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> int:
        if self._template is not None:
            try:
                rendered = self._template.render(messages=list(messages), tools=tools,
                                                 add_generation_prompt=True, **self._specials)
                return self.count_text(rendered)
            except Exception:  # a template that rejects this conversation: fall back to the sum below
                pass
        return _sum_of_parts(self.count_text, messages, tools)


def _sum_of_parts(count_text: Callable[[str], int], messages: Sequence[dict[str, Any]], tools: Any) -> int:
    """Tokens of a chat counted part by part: every message's text, media parts, tool calls, tools."""
    total = PER_REQUEST_OVERHEAD
    for message in messages:
        content = message.get("content")
        total += PER_MESSAGE_OVERHEAD + count_text(message_text(content))
        total += PER_MEDIA_PART * media_parts(content)
        calls = message_calls(message)
        if calls:
            total += count_text(calls)
    if tools:
        total += count_text(json.dumps(tools))
    return total


def _raise_template_error(message: str) -> None:
    raise ValueError(message)


def load_counter(tokenizer: str | None, base_dir: Path | None = None) -> TokenCounter:
    """The exact counter for a configured tokenizer path, else the approximation."""
    if tokenizer is None:
        return ApproximateCounter()
    path = Path(tokenizer)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return TokenizerCounter(path)
