"""The Jinja2 environment chat templates are rendered in: sandboxed, with the names real templates use.

Templates shipped with Hugging Face checkpoints are written for transformers' environment, so this
one offers the same vocabulary: ``raise_exception``, ``strftime_now``, a ``tojson`` filter taking
``ensure_ascii`` / ``indent`` / ``separators`` / ``sort_keys``, the ``loopcontrols`` extension
(``{% break %}``, ``{% continue %}``) and the ``{% generation %}`` block (which marks the
assistant's tokens for training masks; rendering it is rendering its body).

:func:`content_format` tells a template that loops over a message's content parts (multimodal
templates: ``{% for part in message['content'] %}``) from one that prints the content as a string.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvfence.errors import ModelLoadError

__all__ = ["ContentFormat", "TemplateRejected", "compile_chat_template", "content_format"]

# "string": a message's content parts reach the template joined into one string;
# "openai": as the list of parts the client sent.
ContentFormat = Literal["string", "openai"]


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


def content_format(source: str | None) -> ContentFormat:
    """``"openai"`` when the template iterates over a message's ``content`` (it renders parts itself),
    else ``"string"``. A template that does not parse is left to :func:`compile_chat_template` to report."""
    if source is None:
        return "string"
    try:
        tree = jinja2.Environment(extensions=[loopcontrols, _GenerationBlock]).parse(source)
    except jinja2.TemplateSyntaxError:
        return "string"
    return "openai" if any(_reads_content(loop.iter) for loop in tree.find_all(nodes.For)) else "string"


def _reads_content(node: nodes.Node | None) -> bool:
    """``x['content']`` or ``x.content``, possibly behind filters, tests or a slice (``x['content'][1:]``)."""
    while isinstance(node, nodes.Filter | nodes.Test) or (
        isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice)
    ):
        node = node.node
    if isinstance(node, nodes.Getitem):
        return isinstance(node.arg, nodes.Const) and node.arg.value == "content"
    return isinstance(node, nodes.Getattr) and node.attr == "content"
