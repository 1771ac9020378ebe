"""Structured outputs: constrain sampling to a JSON schema, any JSON object, a regex, a choice or a grammar.

The engine knows nothing of grammars; a request carries a :class:`GrammarLogitsProcessor` in
``SamplingParams.logits_processors``, which masks every token its grammar does not allow next.
Grammars are compiled by llguidance against the model's own tokenizer and cached::

    spec = GrammarSpec.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    processor = GrammarLogitsProcessor(compile_grammar(tokenizer, spec))
    SamplingParams(max_tokens=64, logits_processors=[processor])
"""

from kvfence.engine.structured.compiler import CompiledGrammar, GrammarCompiler, compile_grammar
from kvfence.engine.structured.processor import GrammarLogitsProcessor
from kvfence.engine.structured.spec import GrammarKind, GrammarSpec
from kvfence.engine.structured.vocabulary import Vocabulary, vocabulary_of

__all__ = [
    "CompiledGrammar",
    "GrammarCompiler",
    "GrammarKind",
    "GrammarLogitsProcessor",
    "GrammarSpec",
    "Vocabulary",
    "compile_grammar",
    "vocabulary_of",
]
