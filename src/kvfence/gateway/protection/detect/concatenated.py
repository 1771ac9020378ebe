"""Values written as a concatenation of string literals: ``"sk-proj-Ab" + "CdEf" + "…"``.

Code in a prompt or in a tool call's arguments can spell a secret or an address as pieces that no
pattern sees whole (``'AKIA' + 'IOSFODNN7EXAMPLE'``, ``"alice" . "@" . "example.com"``), while the
model (or the code, once run) joins them. :func:`joined_literals` finds two or more quoted literals
joined by ``+`` (Python, JavaScript, Java, C#), ``||`` (SQL), ``.`` / ``..`` (PHP, Lua), ``&`` (VB) or
nothing but whitespace (Python and C put adjacent literals together), also with the quotes escaped as
inside a JSON string (``\\"sk-\\" + \\"…\\"``), and returns the joined text; the detector scans it and a
value that crosses a joint replaces the whole expression. Literals are short (at most
:data:`MAX_LITERAL_CHARS`) and an expression has at most :data:`MAX_PIECES` of them: linear cost.
"""

from __future__ import annotations

import re

from kvfence.gateway.protection.detect.encoded import DecodedRun

__all__ = ["MAX_LITERAL_CHARS", "MAX_PIECES", "joined_literals"]

MAX_LITERAL_CHARS = 256
MAX_PIECES = 64

# both quotes escaped (inside a JSON string) or neither: a literal never takes a JSON string's own quote
_N = f"{{0,{MAX_LITERAL_CHARS}}}"
_LITERAL = r'(?:\\"[^"\\\n]' + _N + r'\\"|"[^"\\\n]' + _N + r'"|' + r"'[^'\\\n]" + _N + r"')"
# an operator, or whitespace alone (adjacent literals): never nothing, so `\"a\""` is no concatenation
_JOIN = r"(?:\s*(?:\+|\|\||\.\.?|&)\s*|\s+)"
_EXPRESSION = re.compile(rf"{_LITERAL}(?:{_JOIN}{_LITERAL}){{1,{MAX_PIECES - 1}}}")
_ONE = re.compile(_LITERAL)


def _content(literal: str) -> str:
    # the quotes, and the backslash before a quote escaped inside a JSON string
    return literal.removeprefix("\\")[1:-1].removesuffix("\\")


def joined_literals(text: str) -> list[DecodedRun]:
    """Each concatenation of two or more literals in ``text``, with the literals' contents joined."""
    if '"' not in text and "'" not in text:
        return []
    found: list[DecodedRun] = []
    for match in _EXPRESSION.finditer(text):
        pieces = [_content(m.group(0)) for m in _ONE.finditer(match.group(0))]
        joints: list[int] = []
        length = 0
        for piece in pieces[:-1]:
            length += len(piece)
            joints.append(length)
        joined = "".join(pieces)
        if len(joined) >= 8:
            found.append(DecodedRun(match.start(), match.end(), joined, "concatenation", tuple(joints)))
    return found
