"""Compile a :class:`GrammarSpec` against a tokenizer, once: a bounded cache of ready matchers.

Compiling (schema to grammar, grammar to lexer and parser) costs from well under a millisecond to
tens of milliseconds; a server sees the same few schemas again and again, so compiled grammars are
kept per (tokenizer, spec) in a least-recently-used cache. Each request gets a copy of the cached
matcher in its start state, so no two requests share matcher state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from kvfence.engine.structured.spec import GrammarKind, GrammarSpec
from kvfence.engine.structured.vocabulary import Vocabulary, vocabulary_of
from kvfence.errors import InvalidParameterError

__all__ = ["DEFAULT_CACHE_SIZE", "CompiledGrammar", "GrammarCompiler", "compile_grammar"]

log = logging.getLogger(__name__)

DEFAULT_CACHE_SIZE = 256
# A client's schema can be long; its error message need not be.
_MAX_ERROR_CHARS = 600

_PARAM_OF_KIND = {
    GrammarKind.JSON_SCHEMA: "schema",
    GrammarKind.JSON_OBJECT: "schema",
    GrammarKind.REGEX: "regex",
    GrammarKind.CHOICE: "choice",
    GrammarKind.GRAMMAR: "grammar",
}


@dataclass(frozen=True)
class CompiledGrammar:
    """A grammar checked against one vocabulary, ready to hand out matchers."""

    spec: GrammarSpec
    vocabulary: Vocabulary
    compile_seconds: float
    _template: Any  # llguidance.LLMatcher in its start state; never advanced

    def new_matcher(self) -> Any:
        """A fresh matcher in the start state (a copy: the template is shared by every request)."""
        return self._template.deep_copy()


class GrammarCompiler:
    """Compiles specs for tokenizers; keeps the ``max_entries`` most recently used results."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_SIZE) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[int, GrammarSpec], CompiledGrammar] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._cache)

    def compile(self, tokenizer: Any, spec: GrammarSpec) -> CompiledGrammar:
        """The compiled grammar of ``spec`` for ``tokenizer``; a bad spec raises InvalidParameterError."""
        vocabulary = vocabulary_of(tokenizer)
        # The entry holds the vocabulary, so the id in its key cannot be reused while it is cached.
        key = (id(vocabulary.llg_tokenizer), spec)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return found
        compiled = _compile(vocabulary, spec)  # outside the lock: llguidance releases the GIL here
        with self._lock:
            self.misses += 1
            self._cache[key] = compiled
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return compiled


def _compile(vocabulary: Vocabulary, spec: GrammarSpec) -> CompiledGrammar:
    import llguidance

    started = time.perf_counter()
    grammar = spec.grammar_text()
    limits = llguidance.LLParserLimits(verbose_errors=False)
    matcher = llguidance.LLMatcher(vocabulary.llg_tokenizer, grammar, log_level=0, limits=limits)
    if matcher.is_error():
        message = str(matcher.get_error()).strip()
        if len(message) > _MAX_ERROR_CHARS:
            message = message[:_MAX_ERROR_CHARS] + " ..."
        what = {"schema": "JSON schema", "regex": "regex", "choice": "choice", "grammar": "grammar"}
        param = _PARAM_OF_KIND[spec.kind]
        raise InvalidParameterError(f"invalid or unsupported {what[param]}: {message}", param=param)
    for warning in matcher.get_grammar_warnings():
        log.info("structured output grammar warning: %s", warning)
    return CompiledGrammar(spec, vocabulary, time.perf_counter() - started, matcher)


_default = GrammarCompiler()


def compile_grammar(tokenizer: Any, spec: GrammarSpec) -> CompiledGrammar:
    """Compile with the process-wide cache (see :class:`GrammarCompiler`)."""
    return _default.compile(tokenizer, spec)
