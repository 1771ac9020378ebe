"""What a structured output must match: a JSON schema, any JSON object, a regex, a choice or a grammar.

A :class:`GrammarSpec` is plain, hashable data (the cache key of compiled grammars); turning it into
llguidance's grammar text is :meth:`GrammarSpec.grammar_text`. Shapes are checked here, so a bad
value raises :class:`~kvfence.errors.InvalidParameterError` before anything is compiled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kvfence.errors import InvalidParameterError

__all__ = ["GrammarKind", "GrammarSpec"]


class GrammarKind(StrEnum):
    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"  # any JSON object
    REGEX = "regex"
    CHOICE = "choice"  # exactly one of a list of strings
    GRAMMAR = "grammar"  # Lark, or GBNF / EBNF as llama.cpp writes it


@dataclass(frozen=True)
class GrammarSpec:
    """One constraint on the whole completion text.

    ``source`` is the text the grammar is compiled from: a JSON schema is re-serialised in its own
    key order (that order is the order of the properties in the answer), so two requests with the
    same schema share one compiled grammar. ``compact_json`` forbids whitespace between JSON
    tokens (vLLM's ``disable_any_whitespace``); ``whitespace_pattern`` replaces the default one.
    """

    kind: GrammarKind
    source: str = ""
    compact_json: bool = False
    whitespace_pattern: str | None = None

    @classmethod
    def json_schema(cls, schema: Any, *, compact: bool = False, whitespace_pattern: str | None = None) -> GrammarSpec:
        """A spec from a schema given as a dict (or boolean schema) or as JSON text."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise InvalidParameterError(f"the JSON schema is not valid JSON: {exc.msg}", param="schema") from None
        if not isinstance(schema, dict | bool):
            raise InvalidParameterError(
                f"a JSON schema must be an object (or true/false), got {type(schema).__name__}", param="schema")
        return cls(GrammarKind.JSON_SCHEMA, json.dumps(schema, ensure_ascii=False),
                   compact, whitespace_pattern)

    @classmethod
    def json_object(cls, *, compact: bool = False, whitespace_pattern: str | None = None) -> GrammarSpec:
        return cls(GrammarKind.JSON_OBJECT, "", compact, whitespace_pattern)

    @classmethod
    def regex(cls, pattern: Any) -> GrammarSpec:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidParameterError("a regex must be a non-empty string", param="regex")
        return cls(GrammarKind.REGEX, pattern)

    @classmethod
    def choice(cls, choices: Any) -> GrammarSpec:
        if (not isinstance(choices, list | tuple) or not choices
                or not all(isinstance(c, str) and c for c in choices)):
            raise InvalidParameterError("a choice must be a non-empty list of non-empty strings", param="choice")
        return cls(GrammarKind.CHOICE, json.dumps(list(choices), ensure_ascii=False))

    @classmethod
    def grammar(cls, text: Any) -> GrammarSpec:
        if not isinstance(text, str) or not text.strip():
            raise InvalidParameterError("a grammar must be a non-empty string (Lark or GBNF)", param="grammar")
        return cls(GrammarKind.GRAMMAR, text)

    def grammar_text(self) -> str:
        """The llguidance grammar this spec stands for (not yet checked against a tokenizer)."""
        import llguidance

        if self.kind is GrammarKind.REGEX:
            return str(llguidance.LLMatcher.grammar_from_regex(self.source))
        if self.kind is GrammarKind.CHOICE:
            # Each choice is a Lark string literal; JSON string escapes are valid Lark escapes.
            alternatives = " | ".join(json.dumps(c, ensure_ascii=False) for c in json.loads(self.source))
            return str(llguidance.LLMatcher.grammar_from_lark(f"start: {alternatives}"))
        if self.kind is GrammarKind.GRAMMAR:
            try:
                return str(llguidance.grammar_from("grammar", self.source))
            except ValueError as exc:
                raise InvalidParameterError(f"the grammar does not parse: {exc}", param="grammar") from None
        schema = '{"type": "object"}' if self.kind is GrammarKind.JSON_OBJECT else self.source
        options: dict[str, Any] = {}
        if self.compact_json:
            options["whitespace_flexible"] = False
        elif self.whitespace_pattern is not None:
            options["whitespace_pattern"] = self.whitespace_pattern
        try:
            return str(llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=options or None))  # type: ignore[arg-type]
        except ValueError as exc:
            raise InvalidParameterError(f"invalid JSON schema: {exc}", param="schema") from None
