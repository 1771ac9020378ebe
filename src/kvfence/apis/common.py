"""What the API translations share: pydantic validation errors as one 400, JSON helpers."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kvfence.errors import RequestError

__all__ = ["arguments_object", "validate"]

_M = TypeVar("_M", bound=BaseModel)


def validate(model: type[_M], data: Any, api: str) -> _M:
    """``model.model_validate(data)``; the first problem as a :class:`RequestError` naming the field."""
    if not isinstance(data, dict):
        raise RequestError(f"the {api} request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = [str(x) for x in err["loc"] if not str(x).startswith(("function-", "tagged-union"))]
        path = loc[0] if loc else "body"
        path += "".join(f"[{x}]" if x.isdigit() else f".{x}" for x in loc[1:])
        if err["type"] == "missing":
            raise RequestError(f"`{path}` is required ({api})", param=loc[0] if loc else None) from None
        if err["type"] == "extra_forbidden":
            raise RequestError(f"`{path}` is not a field this server accepts for {api}",
                               param=loc[0] if loc else None) from None
        raise RequestError(f"invalid `{path}`: {err['msg']} ({api})", param=loc[0] if loc else None) from None


def arguments_object(arguments: str, where: str) -> dict[str, Any]:
    """Tool-call arguments (a JSON text) as the object Anthropic's ``tool_use.input`` is."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        raise RequestError(f"{where}: the tool call's arguments are not JSON") from None
    if not isinstance(value, dict):
        raise RequestError(f"{where}: the tool call's arguments are not a JSON object")
    return value
