"""Where a restored value stands in its answer slot, so it is written in that slot's syntax.

An answer slot (see :mod:`kvfence.gateway.answer.filter`) is one of three kinds of text:

- ``TEXT``: prose (``content``, ``refusal``, a custom tool call's free-text ``input`` ...); a value is
  written as its placeholder's form needs (:mod:`.placeholder_forms`);
- ``JSON_STRING``: the text of a JSON string (tool-call ``function.arguments``); every value is
  JSON-escaped at least once;
- ``JSON_DOCUMENT``: a JSON document (``content`` under a JSON ``response_format``). A placeholder
  inside one of its strings is restored as in ``JSON_STRING``, so a value holding ``"`` or ``\\`` can
  neither end the string nor add keys; text outside strings is left as written (a placeholder cannot
  validly stand there).

:class:`SlotWriter` follows one slot's text piece by piece (a stream's chunks, or the joined tokens of
``logprobs``), carrying what the next piece depends on: the backslash run that ended the last piece
and, in a JSON document, whether it ended inside a string. A placeholder never spans a string's
quotes (no form holds a ``"``), so each string's text is restored on its own.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from kvfence.gateway.protection.pseudonymise.forms import PlaceholderForms

__all__ = ["SlotKind", "SlotWriter", "json_answer_requested"]


class SlotKind(Enum):
    TEXT = "text"
    JSON_STRING = "json_string"
    JSON_DOCUMENT = "json_document"


Span = tuple[int, int, str]


def _backslash_run(text: str, before: int) -> int:
    """The backslash run that ends ``text``, continuing ``before`` when ``text`` is all backslashes."""
    if not text or text[-1] != "\\":
        return 0
    run = len(text) - len(text.rstrip("\\"))
    return before + run if run == len(text) else run


class SlotWriter:
    """One slot's restoration state: feed consecutive pieces, get the placeholders to replace in each."""

    def __init__(self, forms: PlaceholderForms, kind: SlotKind = SlotKind.TEXT) -> None:
        self._forms = forms
        self.kind = kind
        self._backslashes_before = 0
        self._in_string = False  # JSON_DOCUMENT: the text so far ended inside a string

    def restore(self, text: str) -> str:
        """``text`` (the next piece of the slot) with its known placeholders written back."""
        spans = self.spans(text)
        if not spans:
            return text
        out, at = [], 0
        for start, end, written in spans:
            out.append(text[at:start])
            out.append(written)
            at = end
        out.append(text[at:])
        return "".join(out)

    def spans(self, text: str, *, advance: bool = True) -> list[Span]:
        """``(start, end, written)`` of every known placeholder in ``text``, the next piece of the slot;
        ``advance=False`` only looks (the next call still continues the piece before this one)."""
        if not advance:
            state = (self._backslashes_before, self._in_string)
            try:
                return self.spans(text)
            finally:
                self._backslashes_before, self._in_string = state
        if self.kind is not SlotKind.JSON_DOCUMENT:
            spans = self._forms.spans(text, json_string=self.kind is SlotKind.JSON_STRING,
                                      backslashes_before=self._backslashes_before)
            self._backslashes_before = _backslash_run(text, self._backslashes_before)
            return spans
        out: list[Span] = []
        at = 0
        while at < len(text):
            if not self._in_string:
                quote = text.find('"', at)
                if quote == -1:
                    break
                self._in_string, self._backslashes_before = True, 0
                at = quote + 1
                continue
            end = self._string_end(text, at)
            piece = text[at:end]
            out.extend((at + s, at + e, w) for s, e, w in
                       self._forms.spans(piece, json_string=True, backslashes_before=self._backslashes_before))
            self._backslashes_before = _backslash_run(piece, self._backslashes_before)
            if end == len(text):
                break
            self._in_string = False
            at = end + 1
        return out

    def _string_end(self, text: str, at: int) -> int:
        """Where the string running from ``at`` closes (its unescaped ``"``), or ``len(text)``."""
        quote = text.find('"', at)
        while quote != -1:
            run = quote - len(text[at:quote].rstrip("\\")) - at
            if run == quote - at:
                run += self._backslashes_before
            if run % 2 == 0:
                return quote
            quote = text.find('"', quote + 1)
        return len(text)


def json_answer_requested(body: dict[str, Any]) -> bool:
    """Whether the request asks for a JSON document as its answer text: OpenAI's ``response_format``
    ``json_object`` / ``json_schema``, vLLM's ``structured_outputs`` ``json`` / ``json_object`` or its
    older ``guided_json``."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema"):
        return True
    text = body.get("text")  # the Responses API's spelling: text.format
    if isinstance(text, dict) and isinstance(text.get("format"), dict) and \
            text["format"].get("type") in ("json_object", "json_schema"):
        return True
    structured = body.get("structured_outputs")
    if isinstance(structured, dict) and (structured.get("json") is not None or structured.get("json_object")):
        return True
    return body.get("guided_json") is not None
