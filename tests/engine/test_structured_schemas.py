"""Schemas the structured-output tests generate against, and an independent checker for them.

The checker covers the JSON Schema keywords these schemas use (types, properties, required,
additionalProperties, items, enum, const, lengths, bounds, pattern, anyOf, local $ref); it does not
use llguidance, so a grammar that lets through a wrong answer is caught. Its own tests below make
sure it rejects what it should.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

__all__ = ["SCHEMAS", "check_instance"]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "member"],
    "additionalProperties": False,
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "person": PERSON,
    "nested": {
        "type": "object",
        "properties": {
            "owner": PERSON,
            "pets": {"type": "array", "items": {"type": "string", "enum": ["cat", "dog", "fish"]}, "maxItems": 4},
            "score": {"type": "number", "minimum": -10, "maximum": 10},
        },
        "required": ["owner", "pets", "score"],
        "additionalProperties": False,
    },
    "enum_and_null": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 6}]},
            "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"},
        },
        "required": ["color", "note", "code"],
        "additionalProperties": False,
    },
    "array_of_objects": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "ok": {"const": True}},
            "required": ["id", "ok"],
            "additionalProperties": False,
        },
        "minItems": 1,
        "maxItems": 3,
    },
    "defs": {  # what pydantic emits: $defs and $ref, titles
        "$defs": {"Point": {"title": "Point", "type": "object", "additionalProperties": False,
                            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                            "required": ["x", "y"]}},
        "title": "Segment",
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/Point"}, "end": {"$ref": "#/$defs/Point"}},
        "required": ["start", "end"],
        "additionalProperties": False,
    },
}

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def check_instance(value: Any, schema: dict[str, Any], root: dict[str, Any] | None = None, path: str = "$") -> None:
    """Raise AssertionError naming the first place where ``value`` breaks ``schema``."""
    root = root if root is not None else schema
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        check_instance(value, target, root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        assert any(_TYPES[t](value) for t in types), f"{path}: {value!r} is not of type {types}"
    if "enum" in schema:
        assert value in schema["enum"] and type(value) in {type(e) for e in schema["enum"]}, \
            f"{path}: {value!r} not in {schema['enum']}"
    if "const" in schema:
        assert value == schema["const"] and type(value) is type(schema["const"]), f"{path}: {value!r} != const"
    if "anyOf" in schema:
        errors = []
        for option in schema["anyOf"]:
            try:
                check_instance(value, option, root, path)
                break
            except AssertionError as exc:
                errors.append(str(exc))
        else:
            raise AssertionError(f"{path}: no anyOf option matches: {errors}")
    if isinstance(value, str):
        assert len(value) <= schema.get("maxLength", len(value)), f"{path}: {value!r} too long"
        assert len(value) >= schema.get("minLength", 0), f"{path}: {value!r} too short"
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), f"{path}: {value!r} !~ {schema['pattern']}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        assert value >= schema.get("minimum", value), f"{path}: {value} < minimum"
        assert value <= schema.get("maximum", value), f"{path}: {value} > maximum"
    if isinstance(value, list):
        assert len(value) <= schema.get("maxItems", len(value)), f"{path}: too many items"
        assert len(value) >= schema.get("minItems", 0), f"{path}: too few items"
        if "items" in schema:
            for i, item in enumerate(value):
                check_instance(item, schema["items"], root, f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            assert name in value, f"{path}: required {name!r} missing"
        for name, item in value.items():
            if name in props:
                check_instance(item, props[name], root, f"{path}.{name}")
            elif schema.get("additionalProperties") is False:
                raise AssertionError(f"{path}: unexpected property {name!r}")


@pytest.mark.parametrize(("value", "schema_name"), [
    ({"name": "x", "age": 3}, "person"),  # missing required
    ({"name": "x", "age": 3, "member": True, "extra": 1}, "person"),  # additional property
    ({"name": "x", "age": 3.5, "member": True}, "person"),  # not an integer
    ({"name": "x", "age": True, "member": True}, "person"),  # bool is not an integer
    ({"name": "a" * 13, "age": 3, "member": False}, "person"),  # too long
    ({"name": "x", "age": 200, "member": False}, "person"),  # above maximum
    ({"color": "pink", "note": None, "code": "AB12"}, "enum_and_null"),
    ({"color": "red", "note": 5, "code": "AB12"}, "enum_and_null"),
    ({"color": "red", "note": None, "code": "ab12"}, "enum_and_null"),
    ([], "array_of_objects"),
    ([{"id": 1, "ok": 1}], "array_of_objects"),
    ({"start": {"x": 1, "y": 2}, "end": {"x": 1}}, "defs"),
])
def test_checker_rejects_invalid_instances(value: Any, schema_name: str) -> None:
    with pytest.raises(AssertionError):
        check_instance(value, SCHEMAS[schema_name])


def test_checker_accepts_valid_instances() -> None:
    check_instance({"name": "ann", "age": 30, "member": True}, SCHEMAS["person"])
    check_instance({"owner": {"name": "", "age": 0, "member": False}, "pets": ["cat"], "score": -2.5},
                   SCHEMAS["nested"])
    check_instance({"color": "blue", "note": "hi", "code": "XY99"}, SCHEMAS["enum_and_null"])
    check_instance([{"id": -4, "ok": True}], SCHEMAS["array_of_objects"])
    check_instance({"start": {"x": 1, "y": 2}, "end": {"x": 3, "y": 4}}, SCHEMAS["defs"])
