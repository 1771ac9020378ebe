"""The request model is an allowlist: every field a client may send, and what happens to its bytes.

Each endpoint the gateway serves registers one pydantic model of its request body
(:func:`register`). The model is validated strictly (``extra="forbid"``: an unknown top-level or
nested field is a 400 naming it; no type coercion) before any hook reads the body, and every one
of its fields carries exactly one *handling* marker in its ``Annotated`` type, checked when the
model is registered, so a field cannot be added without deciding what happens to it:

- :class:`Scan` -- every string inside it (at any depth, keys of free-form objects included) is a
  :class:`TextSlot` the protection hook scans. ``rewrite=False`` (names, ids, URLs, regexes, the keys
  of a JSON object) means a finding there may raise the class and block, but is never replaced: a
  placeholder would break what the string names (a tool name that ``tool_choice`` refers to, a schema
  property, a URL), so a finding whose action is ``pseudonymise`` refuses the request instead.
- :class:`Nested` -- a sub-model (or a list of them): its own fields say. (A :class:`Scan` field may
  also hold sub-models, e.g. message ``content``, a string or a list of parts: strings are scanned,
  the parts follow their own markers.)
- :class:`Structural` -- passed as sent, unscanned; the type must leave no room for free text
  (numbers, booleans, ``Literal`` choices, token ids) and the marker says why it is safe.
- :class:`Opaque` -- bytes no text detector can read (an image, audio, a file, token ids): passed or
  refused by the data class's ``non_text`` action (``protection/config.py``).
- :class:`Refused` -- present at all, the request is a 400 with the marker's reason (engine-internal
  fields such as ``kv_transfer_params``, a client-chosen chat template, ...).
- :class:`Dropped` -- removed from the body before it is forwarded, with the reason logged.

:func:`admit` (called once by the request path for every endpoint, with or without protection)
validates and applies ``Refused`` / ``Dropped``; :func:`scan_plan` (called by the protection hook on
the body as the hooks see it) lists the text slots and opaque parts.

Adding an endpoint: write its pydantic models with a marker on every field (see
:mod:`kvfence.gateway.apis.openai_chat` for chat and completions), then
``register("responses", ResponsesRequest)``; the request path and the protection hook pick it up.
An endpoint without a registered model is refused by the hook (fail closed).
"""

from __future__ import annotations

import copy
import functools
import logging
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from kvfence.gateway.errors import GatewayRequestError

__all__ = ["Dropped", "Nested", "Opaque", "OpaquePart", "Refused", "RequestModel", "Scan", "ScanPlan",
           "Structural", "TextSlot", "admit", "register", "registered", "scan_json", "scan_plan"]

log = logging.getLogger("kvfence.gateway")

Path = tuple[str | int, ...]


# -- handling markers -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Scan:
    """Every string inside is scanned; replaced by a placeholder only when ``rewrite``."""

    rewrite: bool = True


@dataclass(frozen=True)
class Nested:
    """A sub-model, or a list of them: their fields carry their own markers."""


@dataclass(frozen=True)
class Structural:
    """Passed unscanned: the type admits no free text. ``reason`` says why that is safe."""

    reason: str


@dataclass(frozen=True)
class Opaque:
    """Bytes a text detector cannot read: the data class's ``non_text`` action for ``kind`` decides."""

    kind: str  # "image", "audio", "video", "file", "token_ids", or "url" (a media part's URL)
    text: bool = False  # a string (or list of strings) here is text, scanned (a prompt, not token ids)


@dataclass(frozen=True)
class Refused:
    """Never accepted from a client: the request is a 400 giving ``reason``."""

    reason: str


@dataclass(frozen=True)
class Dropped:
    """Removed before the body is forwarded; ``reason`` is logged at debug level."""

    reason: str


Marker = Scan | Nested | Structural | Opaque | Refused | Dropped
_MARKERS = (Scan, Nested, Structural, Opaque, Refused, Dropped)

# Keys of a free-form JSON value (a schema, a grammar spec) whose string values are structure: scanned,
# never rewritten (a placeholder in a `$ref`, a property name or a regex would change what it means).
STRUCTURAL_JSON_KEYS = frozenset({"type", "$ref", "$schema", "$id", "$anchor", "$defs", "name", "format",
                                  "pattern", "required", "additionalProperties", "strict", "tool_choice",
                                  "propertyNames", "patternProperties", "discriminator", "const"})
# JSON Schema's own keywords, as keys: structure, not content, and not worth a detector's time.
SCHEMA_KEYWORDS = frozenset({"type", "properties", "items", "description", "title", "enum", "default",
                             "examples", "anyOf", "oneOf", "allOf", "not", "$defs", "definitions", "$ref",
                             "$schema", "$id", "required", "additionalProperties", "minimum", "maximum",
                             "minLength", "maxLength", "minItems", "maxItems", "format", "pattern", "const",
                             "name", "schema", "strict", "json_schema", "parameters", "nullable"})
_MAX_DEPTH = 64


class RequestModel(BaseModel):
    """Base of request models: unknown fields refused, no coercion, the client's bytes untouched."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)

    # For a content part: the opaque kind of the part as a whole, e.g. "image" for image_url parts.
    opaque_kind: ClassVar[str | None] = None


# -- results --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TextSlot:
    """One string of the request body and the path to it. ``rewritable``: a placeholder may replace it;
    ``is_key``: the string is a key of a JSON object (scanned, never rewritten)."""

    path: Path
    text: str
    role: str | None = None
    rewritable: bool = True
    is_key: bool = False


@dataclass(frozen=True)
class OpaquePart:
    kind: str
    path: Path


@dataclass
class ScanPlan:
    """What the protection hook must look at in one body."""

    slots: list[TextSlot] = field(default_factory=list)
    opaque: list[OpaquePart] = field(default_factory=list)


# -- registry -------------------------------------------------------------------------------------

_MODELS: dict[str, type[RequestModel]] = {}


def register(endpoint: str, model: type[RequestModel]) -> type[RequestModel]:
    """Make ``model`` the allowlist of ``endpoint``; raises TypeError if a field has no marker."""
    _check_markers(model, set())
    _MODELS[endpoint] = model
    return model


def registered(endpoint: str) -> type[RequestModel] | None:
    return _MODELS.get(endpoint)


@functools.cache
def _fields(model: type[RequestModel]) -> tuple[tuple[str, str, Marker], ...]:
    """(attribute, key in the body, marker) of each field, in scan order."""
    return tuple((name, model.model_fields[name].alias or name, _marker_of(model, name)) for name in _scan_order(model))


@functools.cache
def _field_map(model: type[RequestModel]) -> dict[str, tuple[str, Marker]]:
    return {name: (key, marker) for name, key, marker in _fields(model)}


def _marker_of(model: type[BaseModel], name: str) -> Marker:
    found = [m for m in model.model_fields[name].metadata if isinstance(m, _MARKERS)]
    if len(found) != 1:
        raise TypeError(f"{model.__name__}.{name}: a request-model field needs exactly one handling marker "
                        f"(Scan, Nested, Structural, Opaque, Refused, Dropped), found {len(found)}")
    return found[0]


def _models_in(annotation: Any) -> list[type[RequestModel]]:
    """Request models named anywhere in a type (inside lists, unions, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, RequestModel):
        return [annotation]
    origin = get_origin(annotation)
    if origin is None:
        return []
    if origin in (Union, types.UnionType, list, dict, tuple, typing.Annotated) or isinstance(origin, type):
        return [m for arg in get_args(annotation) for m in _models_in(arg)]
    return []


def _check_markers(model: type[RequestModel], seen: set[type[RequestModel]]) -> None:
    if model in seen:
        return
    seen.add(model)
    for name, info in model.model_fields.items():
        marker = _marker_of(model, name)
        inner = _models_in(info.annotation)
        if inner and not isinstance(marker, Nested | Scan | Refused | Dropped):
            raise TypeError(f"{model.__name__}.{name} holds request models: mark it Nested() or Scan()")
        for sub in inner:
            _check_markers(sub, seen)


# -- admission (every request, protection on or off) ----------------------------------------------

def _where(loc: Sequence[str | int], body: Any = None) -> str:
    """A field path as a client writes it (``messages[0].content[1].image_url``). With ``body``, the
    parts of a pydantic error location that name no key of the body (union members, tags) are left out."""
    out = ""
    node = body
    for at, part in enumerate(loc):
        if body is not None:
            if isinstance(node, dict) and isinstance(part, str) and node.get("type") == part:
                # a tagged union's member is named by its tag: a key only if the rest leads on from it
                after = loc[at + 1] if at + 1 < len(loc) else None
                inner = node.get(part)
                if not (isinstance(inner, dict) and after in inner):
                    continue
            in_list = isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node)
            in_object = isinstance(part, str) and isinstance(node, dict) and part in node
            if not (in_list or in_object):
                continue
            node = node[part]
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _refuse_invalid(exc: ValidationError, endpoint: str, body: dict[str, Any]) -> GatewayRequestError:
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    rank = {"extra_forbidden": 0, "union_tag_invalid": 1}
    first = min(errors, key=lambda e: (rank.get(e["type"], 2), -len(e["loc"])))
    where = _where(first["loc"], body) or "the request body"
    if first["type"] == "extra_forbidden":
        message = (f"`{where}` is not a field this gateway accepts on /{endpoint} (unknown fields are refused, "
                   "not forwarded: see docs/request-model.md)")
    elif first["type"] == "union_tag_invalid":
        message = f"`{where}`: unsupported content part or tool type ({first['msg']})"
    else:
        message = f"`{where}`: {first['msg']}"
    return GatewayRequestError(message, param=where)


def _validate(model: type[RequestModel], body: dict[str, Any], endpoint: str) -> RequestModel:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _refuse_invalid(exc, endpoint, body) from None
    except (RecursionError, ValueError) as exc:  # nesting deeper than the validator can follow
        raise GatewayRequestError(f"the request body cannot be validated: {type(exc).__name__}") from None


def admit(endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    """Validate ``body`` against the endpoint's model; refuse ``Refused`` fields, remove ``Dropped`` ones.

    Returns the body to forward (the same object when nothing was dropped). An endpoint without a
    model is refused: nothing reaches a backend that no allowlist describes."""
    model = _MODELS.get(endpoint)
    if model is None:
        raise GatewayRequestError(f"/{endpoint}: no request model is registered for this endpoint")
    instance = _validate(model, body, endpoint)
    dropped: list[Path] = []
    _apply_policy(instance, (), dropped)
    if not dropped:
        return body
    log.debug("dropped request fields %s", [_where(d) for d in dropped])
    out = copy.deepcopy(body)
    for path in sorted(dropped, key=len, reverse=True):
        node: Any = out
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1], None)
    return out


def _apply_policy(instance: RequestModel, path: Path, dropped: list[Path]) -> None:
    markers = _field_map(type(instance))
    for name in instance.model_fields_set:
        key, marker = markers[name]
        if isinstance(marker, Refused):
            where = _where((*path, key))
            raise GatewayRequestError(f"`{where}` is refused by this gateway: {marker.reason}", param=where)
        if isinstance(marker, Dropped):
            dropped.append((*path, key))
        elif isinstance(marker, Nested | Scan):
            value = getattr(instance, name)
            for sub_path, sub in _sub_models(value, (*path, key)):
                _apply_policy(sub, sub_path, dropped)


def _sub_models(value: Any, path: Path) -> list[tuple[Path, RequestModel]]:
    if isinstance(value, RequestModel):
        return [(path, value)]
    if isinstance(value, list | tuple):
        return [(p, m) for i, item in enumerate(value) for p, m in _sub_models(item, (*path, i))]
    return []


# -- what the protection hook scans ---------------------------------------------------------------

def scan_plan(endpoint: str, body: dict[str, Any]) -> ScanPlan:
    """Every string of ``body`` to scan (with whether it may be rewritten) and every opaque part."""
    model = _MODELS.get(endpoint)
    if model is None:
        raise GatewayRequestError(f"/{endpoint}: no request model is registered for this endpoint; "
                                  "refused (fail closed)")
    plan = ScanPlan()
    _walk_model(_validate(model, body, endpoint), (), None, plan)
    return plan


def _walk_model(instance: RequestModel, path: Path, role: str | None, plan: ScanPlan) -> None:
    cls = type(instance)
    role = getattr(instance, "role", role) if isinstance(getattr(instance, "role", None), str) else role
    if cls.opaque_kind is not None:
        plan.opaque.append(OpaquePart(cls.opaque_kind, path))
    present = instance.model_fields_set
    for name, key, marker in _fields(cls):
        if name not in present:
            continue
        value = getattr(instance, name)
        if value is None:
            continue
        here = (*path, key)
        if isinstance(marker, Scan):
            _walk_json(value, here, role, marker.rewrite, plan, 0)
        elif isinstance(marker, Nested):
            for sub_path, sub in _sub_models(value, here):
                _walk_model(sub, sub_path, role, plan)
        elif isinstance(marker, Opaque):
            if marker.kind == "url":
                _url(value, here, role, plan)
            elif marker.text and (isinstance(value, str) or (
                    isinstance(value, list) and all(isinstance(v, str) for v in value))):
                _walk_json(value, here, role, True, plan, 0)  # text where token ids may also stand
            else:
                plan.opaque.append(OpaquePart(marker.kind, here))


@functools.cache
def _scan_order(cls: type[RequestModel]) -> tuple[str, ...]:
    """Fields a subclass declares first (chat's ``messages`` before the shared sampling fields): the
    order placeholders are numbered in is the order a reader meets the text."""
    own = [n for n in cls.__annotations__ if n in cls.model_fields]
    return (*own, *(n for n in cls.model_fields if n not in own))


def _url(value: Any, path: Path, role: str | None, plan: ScanPlan) -> None:
    """A media URL: a ``data:`` URI is the bytes themselves (its media type is scanned, not the
    base64); any other URL is scanned whole, never rewritten (a placeholder would break the fetch)."""
    if not isinstance(value, str):
        return
    if value[:5].lower() == "data:":
        head = value.split(",", 1)[0]
        plan.slots.append(TextSlot(path, head, role, rewritable=False))
        return
    plan.slots.append(TextSlot(path, value, role, rewritable=False))


def scan_json(value: Any, path: Path, plan: ScanPlan, role: str | None = None) -> None:
    """Add every string of a free-form JSON value to ``plan`` as a :class:`Scan` field's would be."""
    _walk_json(value, path, role, True, plan, 0)


def _walk_json(value: Any, path: Path, role: str | None, rewrite: bool, plan: ScanPlan, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise GatewayRequestError(f"`{_where(path)}` is nested "
                                  f"deeper than {_MAX_DEPTH} levels")
    if isinstance(value, str):
        if value:
            plan.slots.append(TextSlot(path, value, role, rewritable=rewrite))
    elif isinstance(value, RequestModel):
        _walk_model(value, path, role, plan)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and key and key not in SCHEMA_KEYWORDS:
                plan.slots.append(TextSlot((*path, key), key, role, rewritable=False, is_key=True))
            structural = isinstance(item, str) and key in STRUCTURAL_JSON_KEYS
            _walk_json(item, (*path, key), role, rewrite and not structural and key != "required", plan, depth + 1)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _walk_json(item, (*path, i), role, rewrite, plan, depth + 1)
