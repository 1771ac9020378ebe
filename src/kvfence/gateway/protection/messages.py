"""Which texts of a request the protection hook scans and may rewrite.

Chat and completions: the endpoint's allowlist request model (:mod:`kvfence.gateway.apis.request_model`) says, field
by field: scanned, passed as named structure, opaque (an image, audio, a file, token ids: the data
class's ``non_text`` action decides) or refused. Scanned strings that other parts of the request
refer to (tool and function names, ``tool_call_id``, the keys and structural values of a JSON schema,
media URLs, regexes and grammars) are *scan-only*: a finding there can raise the class or block, but
is never replaced by a placeholder.

Responses, Messages and embeddings requests: their adapters in :mod:`kvfence.apis` say where the text
lives (``text_paths``; their allowlist models are checked by ``gateway/apis``), and the shared fields
(``tools``, schemas, ``metadata`` ...) are walked as the request model walks free-form JSON: every
string and key scanned, structural values and keys scan-only.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from kvfence.gateway.apis.request_model import (
    OpaquePart,
    ScanPlan,
    TextSlot,
    registered,
    scan_json,
    scan_plan,
)
from kvfence.gateway.errors import GatewayRequestError

__all__ = ["OpaquePart", "ScanPlan", "TextSlot", "request_plan", "set_texts", "text_slots"]

# Request fields of the other APIs whose strings reach the model as prompt text or constrain it.
_SCHEMA_FIELDS = ("tools", "functions", "response_format", "guided_json", "guided_choice", "structured_outputs",
                  "prediction", "documents", "user", "metadata", "tool_choice")
_API_SCHEMA_FIELDS = {"responses": ("text",)}


def _api_plan(endpoint: str, body: dict[str, Any]) -> ScanPlan | None:
    """The other APIs' texts, where their adapters say they live (:mod:`kvfence.apis`)."""
    from kvfence.apis import embeddings, messages, responses
    from kvfence.errors import RequestError

    paths = {"responses": responses.text_paths, "messages": messages.text_paths,
             "count_tokens": messages.text_paths, "embeddings": embeddings.text_paths}.get(endpoint)
    if paths is None:
        return None
    try:
        plan = ScanPlan([TextSlot(path, text, role) for path, text, role in paths(body)])
    except RequestError as exc:
        raise GatewayRequestError(exc.message, param=exc.param) from None
    for key in (*_SCHEMA_FIELDS, *_API_SCHEMA_FIELDS.get(endpoint, ())):
        if key in body:
            scan_json(body[key], (key,), plan)
    return plan


def request_plan(endpoint: str, body: dict[str, Any]) -> ScanPlan:
    """The text slots and opaque parts of ``body`` (a 400 for a body its model refuses; an endpoint
    nothing describes is refused: fail closed)."""
    import kvfence.gateway.apis.openai_chat  # noqa: F401  (registers the chat and completions models)

    if registered(endpoint) is not None:
        return scan_plan(endpoint, body)
    plan = _api_plan(endpoint, body)
    if plan is None:
        raise GatewayRequestError(f"/{endpoint}: the gateway does not know where this endpoint's text is; "
                                  "refused (fail closed)")
    return plan


def text_slots(endpoint: str, body: dict[str, Any]) -> list[TextSlot]:
    """Every scannable string of a request body, in document order."""
    return request_plan(endpoint, body).slots


def set_texts(body: dict[str, Any], slots: Sequence[TextSlot], texts: Sequence[str]) -> dict[str, Any]:
    """A copy of ``body`` with each slot's string replaced; the input body is left untouched.

    A scan-only slot (a key, a name, a URL) must come back unchanged: the hook refuses the request
    before it would have to rewrite one."""
    changed = [(slot, text) for slot, text in zip(slots, texts, strict=True) if text != slot.text]
    if not changed:
        return body
    result = copy.deepcopy(body)
    for slot, text in changed:
        if not slot.rewritable:
            raise ValueError(f"slot {slot.path} is scan-only and cannot be rewritten")
        node: Any = result
        for key in slot.path[:-1]:
            node = node[key]
        node[slot.path[-1]] = text
    return result
