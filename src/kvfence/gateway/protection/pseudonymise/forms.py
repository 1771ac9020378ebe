"""The ways a model writes a placeholder, and how a restored value is written back in each.

A model does not always copy ``<EMAIL_1>`` as it was given. Inside tool-call arguments (a JSON
string) and in JSON it writes in its answer, it often escapes the angle brackets: ``\\u003cEMAIL_1\\u003e``
(one JSON string level; Go's and many other encoders' form), ``\\\\u003cEMAIL_1\\\\u003e`` (a JSON string
inside a JSON string); in HTML it writes ``&lt;EMAIL_1&gt;`` (also ``&#60;`` / ``&#x3c;``). The form
says where the placeholder stands, so the value is written back the same way: JSON-escaped once or
twice, HTML-escaped. A *slot* that is itself a JSON string's text (``function.arguments``) adds one
JSON level to every form, so a plain ``<EMAIL_1>`` there gets the JSON-escaped value: a value holding
``"``, ``\\`` or a newline can neither break the arguments nor add keys to them.

A backslash run before ``u003c`` counts by parity, as a JSON decoder reads it: an even run is
escaped backslashes followed by the letters ``u003c``, not a placeholder. Only placeholders of the
request's own restore table are replaced; any other form is left as written.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["FORM", "PlaceholderForms", "json_escape", "written_placeholders"]

# Opening and closing delimiters: a JSON \u escape (after a whole backslash run), an HTML character
# reference, or the plain character. The inner part is PLACEHOLDER's (pseudonymise.py) without <>.
FORM = re.compile(
    r"(?:(?<!\\)(?P<open_bs>\\+)u003[cC]|(?P<open_html>&(?i:lt|#60|#x3c);)|<)"
    r"(?P<inner>[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_\d{1,6})"
    r"(?:(?P<close_bs>\\{1,2})u003[eE]|(?P<close_html>&(?i:gt|#62|#x3e);)|>)"
)

# Lower-cased delimiters, for telling whether a held-back suffix may still become a form.
_OPENERS = ("<", "\\u003c", "\\\\u003c", "&lt;", "&#60;", "&#x3c;")
_CLOSERS = (">", "\\u003e", "\\\\u003e", "&gt;", "&#62;", "&#x3e;")
_INNER_RUN = re.compile(r"[A-Z0-9_]*")
_START = re.compile(r"[<\\&]")
_OPENERS_BY_START = {start: tuple(o for o in _OPENERS if o[0] == start) for start in "<\\&"}


def json_escape(value: str, levels: int = 1) -> str:
    """``value`` as the text of a JSON string, ``levels`` times over (``json.dumps(value)[1:-1]`` once)."""
    for _ in range(levels):
        value = json.dumps(value)[1:-1]
    return value


def written_placeholders(text: str) -> set[str]:
    """Every placeholder written in ``text`` in any form, as ``<LABEL_N>``."""
    if "<" not in text and "u003" not in text and "&" not in text:
        return set()
    return {f"<{m.group('inner')}>" for m in FORM.finditer(text)}


@dataclass(frozen=True)
class _Form:
    """How one match is written: JSON string levels it sits in, and whether it is HTML text."""

    json_levels: int
    is_html: bool


def _json_levels(backslashes: int) -> int | None:
    """JSON string levels a ``\\u003c`` preceded by this many backslashes (the whole run) opens."""
    if backslashes % 2 == 1:
        return 1
    if backslashes % 4 == 2:
        return 2
    return None  # deeper nesting, or escaped backslashes followed by the plain letters "u003c"


def _form_of(match: re.Match[str], backslashes_before: int) -> tuple[_Form, int] | None:
    """The form of ``match`` and how many backslashes of its opening run are the caller's own text."""
    open_bs, close_bs = match.group("open_bs"), match.group("close_bs")
    kept = 0
    open_levels: int | None = 0
    if open_bs is not None:
        run = len(open_bs) + (backslashes_before if match.start() == 0 else 0)
        open_levels = _json_levels(run)
        if open_levels is None or open_levels > len(open_bs):
            return None
        kept = len(open_bs) - open_levels
    close_levels = len(close_bs) if close_bs is not None else 0
    open_html, close_html = match.group("open_html") is not None, match.group("close_html") is not None
    if open_html or close_html:
        # HTML on both sides, or an HTML opening with a plain '>' (which HTML needs no escape for)
        if not open_html or open_levels or close_levels:
            return None
        return _Form(0, True), kept
    if open_levels and close_levels and open_levels != close_levels:
        return None
    return _Form(max(open_levels or 0, close_levels), False), kept


class PlaceholderForms:
    """One request's restore table, matched in every written form (see the module docstring)."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self._table = dict(table)
        inners = {p[1:-1] for p in self._table if p.startswith("<") and p.endswith(">")}
        self._inner_prefixes = {inner[:i] for inner in inners for i in range(1, len(inner) + 1)}
        self._inners = inners
        longest = max((len(inner) for inner in inners), default=0)
        self.max_hold = (max(map(len, _OPENERS)) + longest + max(map(len, _CLOSERS)) - 1) if inners else 0

    def __bool__(self) -> bool:
        return bool(self._table)

    def restore(self, text: str, *, json_string: bool = False, backslashes_before: int = 0) -> str:
        """``text`` with every known placeholder replaced by its value, written as its form needs.

        ``json_string``: ``text`` is the inside of a JSON string (tool-call arguments), so every value
        is JSON-escaped at least once. ``backslashes_before``: the backslash run that ended the text
        before this one (a stream's earlier chunk), which a ``\\u003c`` at the very start continues.
        """
        if not self._table or ("<" not in text and "u003" not in text and "&" not in text):
            return text

        def replace(match: re.Match[str]) -> str:
            written = self._written(match, json_string, backslashes_before)
            return match.group(0) if written is None else written

        return FORM.sub(replace, text)

    def spans(self, text: str, *, json_string: bool = False,
              backslashes_before: int = 0) -> list[tuple[int, int, str]]:
        """``(start, end, written)`` for every known placeholder in ``text``, as :meth:`restore` replaces
        them (for callers that must know where each one was, such as per-token fields)."""
        if not self._table or ("<" not in text and "u003" not in text and "&" not in text):
            return []
        out = []
        for match in FORM.finditer(text):
            written = self._written(match, json_string, backslashes_before)
            if written is not None:
                out.append((match.start(), match.end(), written))
        return out

    def _written(self, match: re.Match[str], json_string: bool, backslashes_before: int) -> str | None:
        """What replaces ``match``, or None when it is not a known placeholder in a consistent form."""
        value = self._table.get(f"<{match.group('inner')}>")
        if value is None:
            return None
        found = _form_of(match, backslashes_before)
        if found is None:
            return None
        form, kept = found
        if form.is_html:
            written = html.escape(value, quote=True)
            return "\\" * kept + (json_escape(written) if json_string else written)
        levels = max(form.json_levels, 1) if json_string else form.json_levels
        return "\\" * kept + json_escape(value, levels)

    def hold_from(self, buffer: str) -> int:
        """Where the suffix of ``buffer`` that may still become a known placeholder starts (its length if none).

        Holding more than needed only delays text; holding less would emit half a placeholder, so
        this accepts every delimiter spelling :data:`FORM` does (and a few it does not).
        """
        if not self._inners:
            return len(buffer)
        start = _START.search(buffer, max(0, len(buffer) - self.max_hold))
        while start is not None:
            index = start.start()
            if self._may_become_form(buffer[index:], _OPENERS_BY_START[buffer[index]]):
                return index
            start = _START.search(buffer, index + 1)
        return len(buffer)

    def _may_become_form(self, suffix: str, openers: tuple[str, ...]) -> bool:
        for opener in openers:
            head = suffix[:len(opener)].lower()
            if len(suffix) < len(opener):
                if opener.startswith(head):
                    return True
            elif head == opener and self._may_finish(suffix[len(opener):]):
                return True
        return False

    def _may_finish(self, rest: str) -> bool:
        """``rest`` (after an opening) is a proper prefix of a known inner part and a closing."""
        end = _INNER_RUN.match(rest).end()  # type: ignore[union-attr]  # matches the empty string too
        inner, closing = rest[:end], rest[end:].lower()
        if not closing:
            return not inner or inner in self._inner_prefixes
        return inner in self._inners and any(len(closing) < len(c) and c.startswith(closing) for c in _CLOSERS)
