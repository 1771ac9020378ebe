"""The Jinja2 environment chat templates are rendered in: sandboxed, with the names real templates use.

Templates shipped with Hugging Face checkpoints are written for transformers' environment, so this
one offers the same vocabulary: ``raise_exception``, ``strftime_now``, a ``tojson`` filter taking
``ensure_ascii`` / ``indent`` / ``separators`` / ``sort_keys``, the ``loopcontrols`` extension
(``{% break %}``, ``{% continue %}``) and the ``{% generation %}`` block (which marks the
assistant's tokens for training masks; rendering it is rendering its body).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvfence.errors import ModelLoadError

__all__ = ["TemplateRejected", "compile_chat_template"]


class TemplateRejected(Exception):
    """The template called ``raise_exception``: it refuses these messages (a client error)."""


def _raise_exception(message: str) -> None:
    raise TemplateRejected(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None,
    separators: tuple[str, str] | None = None, sort_keys: bool = False,
) -> str:
    # Not Jinja2's own tojson: that one HTML-escapes `<`, `>`, `&` and `'`, which a prompt must not.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _GenerationBlock(Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body unchanged."""

    tags = {"generation"}  # noqa: RUF012 - the type jinja2.ext.Extension declares

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a chat template; a syntax error is a :class:`ModelLoadError` (the model is broken)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
        extensions=[loopcontrols, _GenerationBlock],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ModelLoadError(f"the model's chat template does not parse: {exc}") from exc
