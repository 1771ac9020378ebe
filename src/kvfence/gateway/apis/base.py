"""The adapter interface and what the adapters share: per-slot filter chains, named SSE events."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kvfence.errors import RequestError
from kvfence.gateway.answer.filter import FilterChain
from kvfence.gateway.errors import GatewayError, GatewayRequestError
from kvfence.gateway.policy.schema import BackendConfig, DataClassConfig
from kvfence.openai_wire import encode_event, error_type_for, normalise_error_body

__all__ = ["API_PATHS", "ApiCall", "NativeStream", "SlotChains", "encode_named", "event_object", "new_call", "parse_event"]

# Gateway path -> endpoint name (the ``RequestContext.endpoint`` of the hooks, the metrics label).
API_PATHS = {"/v1/responses": "responses", "/v1/messages": "messages", "/v1/messages/count_tokens": "count_tokens",
             "/v1/embeddings": "embeddings"}

MakeChain = Callable[[], FilterChain]


def encode_named(name: str | None, payload: dict[str, Any]) -> bytes:
    """One SSE event with an ``event:`` line (the Responses and Messages streams name every event)."""
    return encode_event(payload, event=name)  # the framing of every kvfence stream: kvfence.openai_wire


def event_object(data: str) -> dict[str, Any]:
    """A backend's stream event as a JSON object; anything else is a broken stream (``ValueError``)."""
    try:
        event = json.loads(data)
    except ValueError:
        raise ValueError("the backend sent a stream event that is not JSON") from None
    if not isinstance(event, dict):
        raise ValueError("the backend sent a stream event that is not a JSON object")
    return event


def parse_event(event: bytes) -> tuple[str | None, str | None]:
    """(event name, joined data) of one raw SSE event; data None for a comment / keep-alive."""
    name: str | None = None
    data: list[bytes] = []
    for line in event.split(b"\n"):
        line = line.rstrip(b"\r")
        if line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
        elif line.startswith(b"data:"):
            data.append(line[5:].removeprefix(b" "))
    return name, (b"\n".join(data).decode("utf-8") if data else None)


class SlotChains:
    """One filter chain per text slot of an answer; a slot is any hashable key the adapter chooses.

    ``kind`` of a slot: "content" (the answer's text: a JSON document when a JSON format was asked
    for), "json" (the text of JSON: tool arguments / input) or "prose"."""

    def __init__(self, make_chain: MakeChain | None) -> None:
        self._make = make_chain
        self._chains: dict[Any, FilterChain] = {}
        self.emitted: dict[Any, str] = {}  # what went out of each slot so far

    @property
    def active(self) -> bool:
        return self._make is not None

    def _new(self, kind: str) -> FilterChain | None:
        if self._make is None:
            return None
        chain = self._make()
        if kind == "json":
            chain.restore_into_json_string()
        elif kind == "content":
            chain.restore_into_content()
        return chain

    def feed(self, slot: Any, kind: str, text: str) -> str:
        chain = self._chains.get(slot)
        if chain is None and slot not in self.emitted:
            chain = self._new(kind)
            if chain is not None:
                self._chains[slot] = chain
        out = chain.feed(text) if chain is not None else text
        self.emitted[slot] = self.emitted.get(slot, "") + out
        return out

    def finish(self, slot: Any) -> str:
        """The slot's held-back tail (once); the slot is closed."""
        chain = self._chains.pop(slot, None)
        tail = chain.finish() if chain is not None else ""
        if tail:
            self.emitted[slot] = self.emitted.get(slot, "") + tail
        return tail

    def open_slots(self) -> list[Any]:
        return list(self._chains)

    def whole(self, kind: str, text: str) -> str:
        """A text seen at once (a whole answer's field, or one not streamed before): a fresh chain."""
        chain = self._new(kind)
        return text if chain is None else chain.feed(text) + chain.finish()

    def final(self, slot: Any, kind: str, text: str) -> str:
        """A field's complete text in a closing event: what was emitted for the slot when it was
        streamed (so the closing copy says what the deltas said), else the text filtered whole."""
        if slot in self.emitted:
            return self.emitted[slot]
        return self.whole(kind, text)


def strings_filtered(value: Any, chains: SlotChains, depth: int = 0) -> Any:
    """Every string inside a JSON value (a tool call's ``input`` object) filtered whole, as prose."""
    if depth > 32:
        return value
    if isinstance(value, str):
        return chains.whole("prose", value) if value else value
    if isinstance(value, dict):
        return {k: strings_filtered(v, chains, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [strings_filtered(v, chains, depth + 1) for v in value]
    return value


class NativeStream:
    """A streamed answer in one API's event format: each upstream event in, the events to send out."""

    ended = False  # the stream's own end marker was seen
    reported_output_tokens: int | None = None  # the backend's usage, when an event carried it
    # Names of the events that end the stream (its ``event:`` line). With nothing to filter and
    # nothing to count (``relays_unchanged``), a named event goes out as it came: only these are looked for.
    END_NAMES: frozenset[str] = frozenset()
    relays_unchanged = False

    def event(self, name: str | None, data: str) -> list[bytes]:
        raise NotImplementedError

    def flush(self) -> list[bytes]:
        """What is still held back when the upstream stream ends."""
        return []

    def error_event(self, error: GatewayError) -> bytes:
        raise NotImplementedError

    def texts(self) -> list[str]:
        """The model text streamed so far (to count it when the backend sent no usage)."""
        return []


class ApiCall:
    """One request to an API other than chat / completions. Subclasses say what differs (see package)."""

    endpoint = ""
    streams = True

    def __init__(self, body: dict[str, Any]) -> None:
        self.original = body  # as the client sent it (before the hooks rewrote it)

    # -- request side -----------------------------------------------------------------------------
    def check(self, body: dict[str, Any]) -> None:
        """The allowlist request model: a 400 naming the field for anything else."""

    def check_class(self, data_class: DataClassConfig) -> None:
        """Refusals that depend on the request's final data class (state kept at the backend)."""

    def usable(self, backend: BackendConfig) -> bool:
        """Whether ``backend`` can take this call (the APIs it speaks, the vendor facts it needs)."""
        return "openai" in backend.apis

    def upstream(self, backend: BackendConfig, body: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
        """(path under the backend's base URL, the body to send, extra headers) for ``backend``."""
        raise NotImplementedError

    # -- answer side ------------------------------------------------------------------------------
    def filter_whole(self, answer: dict[str, Any], make_chain: MakeChain | None) -> dict[str, Any]:
        return answer

    def stream(self, make_chain: MakeChain | None) -> NativeStream:
        raise NotImplementedError

    def output_tokens(self, answer: Any) -> int | None:
        """The backend's count of a whole answer's generated tokens, when it gives one."""
        usage = answer.get("usage") if isinstance(answer, dict) else None
        value = usage.get("output_tokens") if isinstance(usage, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    def answer_texts(self, answer: Any) -> list[str]:
        return []

    # -- errors -----------------------------------------------------------------------------------
    def error_body(self, error: GatewayError) -> dict[str, Any]:
        return error.to_body()

    def upstream_error(self, raw: bytes, status: int, backend: str) -> bytes | None:
        """An upstream error body in this API's shape (None: already is)."""
        return normalise_error_body(raw, status, backend)


def request_error(exc: RequestError) -> GatewayRequestError:
    return GatewayRequestError(exc.message, param=exc.param)


def new_call(endpoint: str, body: dict[str, Any]) -> ApiCall:
    """The adapter of ``endpoint`` for one request."""
    from kvfence.gateway.apis.embeddings import EmbeddingsCall
    from kvfence.gateway.apis.messages import CountTokensCall, MessagesCall
    from kvfence.gateway.apis.responses import ResponsesCall

    kinds: dict[str, type[ApiCall]] = {"responses": ResponsesCall, "messages": MessagesCall,
                                       "count_tokens": CountTokensCall, "embeddings": EmbeddingsCall}
    return kinds[endpoint](body)


__all__ += ["error_type_for", "request_error", "strings_filtered"]
