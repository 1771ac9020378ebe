"""Structured outputs on the HTTP API: from request fields to a grammar logits processor.

Accepted spellings (one constraint per request; two are a 400):

- chat ``response_format``: ``{"type": "text"}``, ``{"type": "json_object"}`` (any JSON object),
  ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``;
- vLLM's ``structured_outputs`` on both endpoints: ``{"json": schema}``, ``{"regex": str}``,
  ``{"choice": [str, ...]}``, ``{"grammar": lark_or_gbnf}``, ``{"json_object": true}``, with
  ``whitespace_pattern`` / ``disable_any_whitespace`` / ``disable_additional_properties`` for the
  JSON ones;
- vLLM's older top-level ``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_grammar``
  and ``guided_whitespace_pattern`` (``guided_decoding_backend`` is ignored: there is one backend).

Every error (bad schema, unsupported schema keyword, bad regex, a tokenizer whose tokens are not
bytes) is a 400 whose ``param`` names the field the constraint came from.

Compiled grammars are cached per cache scope (:class:`ScopedGrammarCache`), never across scopes: a
schema compiles in milliseconds (8 ms for a 30-field schema with the built-in model) and a cached one
in microseconds, so one process-wide cache would let a tenant confirm a guess of another tenant's
schema (field names, enum values) from its latency, as a shared prefix cache would (I6).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kvfence.engine.sampling.sampling_params import LogitsProcessor
from kvfence.engine.structured import GrammarLogitsProcessor, GrammarSpec, compile_grammar
from kvfence.engine.structured.compiler import DEFAULT_CACHE_SIZE, CompiledGrammar, GrammarCompiler
from kvfence.engine.structured.processor import DEFAULT_MAX_STATES
from kvfence.errors import InvalidParameterError
from kvfence.scope import is_unshared
from kvfence.server.api_errors import APIError
from kvfence.server.openai.tools import tool_calling

__all__ = ["ScopedGrammarCache", "StructuredOutput", "grammar_spec", "structured_output"]

_GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
# Keys of vLLM's StructuredOutputsParams this server reads, and ones that change nothing here.
_CONSTRAINT_KEYS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
_OPTION_KEYS = ("whitespace_pattern", "disable_any_whitespace", "disable_fallback",
                "disable_additional_properties", "backend")


@dataclass(frozen=True)
class StructuredOutput:
    """What the sampling parameters of a constrained request get: a processor, extra stop ids."""

    logits_processors: list[LogitsProcessor] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)


class ScopedGrammarCache:
    """Compiled grammars keyed by (cache scope, tokenizer, spec), the ``max_entries`` most recent.

    A miss compiles with a compiler of its own, so nothing another scope compiled is reused (I6).
    Per-request scopes (``--cache-scope request``) are never cached, like their prefix pages.
    """

    def __init__(self, max_entries: int = DEFAULT_CACHE_SIZE) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[bytes, int, GrammarSpec], CompiledGrammar] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def compile(self, tokenizer: Any, spec: GrammarSpec, scope_key: bytes) -> CompiledGrammar:
        key = (scope_key, id(tokenizer), spec)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        compiled = GrammarCompiler(max_entries=1).compile(tokenizer, spec)  # a fresh compiler: no shared entry
        if is_unshared(scope_key):
            return compiled
        with self._lock:
            # The entry keeps the tokenizer's vocabulary alive, not the tokenizer: the server holds that.
            self._entries[key] = compiled
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return compiled


_scoped = ScopedGrammarCache()


def structured_output(req: Any, model: Any, scope_key: bytes | None = None) -> StructuredOutput:
    """The processor for the constraint ``req`` asks for (none: an empty StructuredOutput).

    ``ignore_eos`` keeps EOS out until the grammar is complete; then EOS is the only token left and
    it is added to the stop tokens, so the answer ends with finish_reason "stop" rather than EOS
    tokens up to max_tokens. With ``scope_key`` (the server's), the grammar comes from that scope's
    cache only; without, from the process-wide one (offline use, one tenant).
    """
    found = grammar_spec(req)
    if found is None:
        return StructuredOutput()
    spec, param = found
    if req.min_tokens:
        # The engine bans EOS before min_tokens; a grammar that is complete earlier has no other token.
        raise APIError.bad_request("min_tokens cannot be combined with structured outputs; leave it out",
                                   param="min_tokens")
    try:
        if scope_key is None:
            compiled = compile_grammar(model.tokenizer, spec)
        else:
            compiled = _scoped.compile(model.tokenizer, spec, scope_key)
    except InvalidParameterError as exc:
        raise APIError.bad_request(f"{param}: {exc.message}", param=param) from exc
    ignore_eos = bool(req.ignore_eos)
    stop_ids = list(compiled.vocabulary.eos_token_ids) if ignore_eos else []
    # All choices of the prompt share the processor: room for each one's state, and some to spare.
    sequences = max(_positive_int(getattr(req, "n", None)), _positive_int(getattr(req, "best_of", None)))
    processor = GrammarLogitsProcessor(compiled, ignore_eos=ignore_eos,
                                       max_states=max(DEFAULT_MAX_STATES, 2 * sequences))
    return StructuredOutput([processor], stop_ids)


def _positive_int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 1


def grammar_spec(req: Any) -> tuple[GrammarSpec, str] | None:
    """The constraint of a request and the field it came from, or None; shapes are checked here."""
    found: list[tuple[GrammarSpec, str]] = []
    response_format = getattr(req, "response_format", None)
    if response_format is not None:
        spec = _from_response_format(response_format)
        if spec is not None:
            found.append((spec, "response_format"))
    if getattr(req, "structured_outputs", None) is not None:
        found.append((_from_structured_outputs(req.structured_outputs), "structured_outputs"))
    if getattr(req, "tools", None):
        calling = tool_calling(req)
        if calling is not None:
            found.append((calling.spec, "tool_choice"))
    whitespace = getattr(req, "guided_whitespace_pattern", None)
    for name in _GUIDED_FIELDS:
        value = getattr(req, name, None)
        if value is not None:
            found.append((_checked(name, lambda v=value, n=name: _guided(n, v, whitespace)), name))
    if len(found) > 1:
        names = ", ".join(param for _, param in found)
        raise APIError.bad_request(f"only one structured-output constraint per request; got {names}",
                                   param=found[1][1])
    return found[0] if found else None


def _checked(param: str, build: Any) -> GrammarSpec:
    try:
        spec: GrammarSpec = build()
    except InvalidParameterError as exc:
        raise APIError.bad_request(f"{param}: {exc.message}", param=param) from exc
    return spec


def _from_response_format(value: Any) -> GrammarSpec | None:
    param = "response_format"
    if not isinstance(value, dict):
        raise APIError.bad_request("response_format must be an object", param=param)
    kind = value.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec.json_object()
    if kind == "json_schema":
        body = value.get("json_schema")
        if not isinstance(body, dict):
            raise APIError.bad_request("response_format.json_schema must be an object with a 'schema'", param=param)
        if "schema" not in body:
            raise APIError.bad_request("response_format.json_schema.schema is required", param=param)
        strict = body.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise APIError.bad_request("response_format.json_schema.strict must be a boolean", param=param)
        return _checked(param, lambda: GrammarSpec.json_schema(body["schema"]))
    raise APIError.bad_request(
        f"response_format type {kind!r} is not supported; use 'text', 'json_object' or 'json_schema'", param=param)


def _from_structured_outputs(value: Any) -> GrammarSpec:
    param = "structured_outputs"
    if not isinstance(value, dict):
        raise APIError.bad_request("structured_outputs must be an object", param=param)
    unknown = sorted(set(value) - set(_CONSTRAINT_KEYS) - set(_OPTION_KEYS))
    if unknown:
        raise APIError.bad_request(f"structured_outputs: unknown key(s) {', '.join(unknown)}; supported: "
                                   f"{', '.join(_CONSTRAINT_KEYS[:5] + _OPTION_KEYS[:2])}", param=param)
    given = [k for k in _CONSTRAINT_KEYS if value.get(k) not in (None, False)]
    if len(given) != 1:
        raise APIError.bad_request(
            "structured_outputs needs exactly one of json, regex, choice, grammar, json_object; "
            f"got {', '.join(given) or 'none'}", param=param)
    kind = given[0]
    closed = value.get("disable_additional_properties", False)
    if not isinstance(closed, bool):
        raise APIError.bad_request("structured_outputs.disable_additional_properties must be a boolean", param=param)
    if closed and kind == "json":
        value = {**value, "json": _closed_objects(_checked(param, lambda: _schema_object(value["json"])))}
    if kind == "structural_tag":
        raise APIError.bad_request("structured_outputs.structural_tag is not supported", param=param)
    compact = value.get("disable_any_whitespace", False)
    whitespace = value.get("whitespace_pattern")
    if not isinstance(compact, bool) or (whitespace is not None and not isinstance(whitespace, str)):
        raise APIError.bad_request("structured_outputs: disable_any_whitespace must be a boolean and "
                                   "whitespace_pattern a string", param=param)
    if kind == "json_object":
        if value["json_object"] is not True:
            raise APIError.bad_request("structured_outputs.json_object must be true", param=param)
        return GrammarSpec.json_object(compact=compact, whitespace_pattern=whitespace)
    return _checked(param, lambda: _guided(f"guided_{kind}", value[kind], whitespace, compact=compact))


def _schema_object(schema: Any) -> Any:
    spec = GrammarSpec.json_schema(schema)  # checks the shape; gives the schema back parsed
    return json.loads(spec.source)


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONES = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")


def _closed_objects(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` wherever an object schema leaves it unset
    (vLLM's ``disable_additional_properties``); only subschema positions are visited, so ``const``,
    ``enum`` and ``default`` values are never changed."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            out[key] = {name: _closed_objects(sub) for name, sub in schema[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            out[key] = [_closed_objects(sub) for sub in schema[key]]
    for key in _SCHEMA_ONES:
        if key in schema:
            sub = schema[key]
            out[key] = [_closed_objects(s) for s in sub] if isinstance(sub, list) else _closed_objects(sub)
    if (schema.get("type") == "object" or "properties" in schema) and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out


def _guided(name: str, value: Any, whitespace: Any, *, compact: bool = False) -> GrammarSpec:
    if name == "guided_json":
        if whitespace is not None and not isinstance(whitespace, str):
            raise InvalidParameterError("whitespace_pattern must be a string", param="whitespace_pattern")
        return GrammarSpec.json_schema(value, compact=compact, whitespace_pattern=whitespace)
    if name == "guided_regex":
        return GrammarSpec.regex(value)
    if name == "guided_choice":
        return GrammarSpec.choice(value)
    return GrammarSpec.grammar(value)
