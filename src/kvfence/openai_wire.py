"""OpenAI's wire format, shared by ``kvfence serve`` and ``kvfence gateway``: the error body and the
server-sent-event framing of streamed answers. One home, so an error or a stream event reads the same
whichever part of kvfence (or which API adapter) wrote it.

- :func:`error_body` / :func:`error_bytes`: ``{"error": {"message", "type", "param", "code"}}``, the
  shape the official ``openai`` client turns into its exception classes;
- :func:`error_type_for`: the ``type`` OpenAI uses for an HTTP status;
- :func:`normalise_error_body`: an upstream's error in another shape (vLLM's ``{"object": "error"}``,
  ``{"detail": ...}``, an HTML page) rewritten into OpenAI's;
- :func:`encode_event`, :class:`SSEDecoder`, :func:`event_data`: ``data: ...`` events out and in
  (LF, CRLF and CR line ends, comments and keep-alives, as the SSE specification allows);
- :func:`decode_request_json`: a request body's JSON, with what no parser should pass on refused as
  :class:`InvalidJSON` (a 400): nesting deeper than :data:`MAX_JSON_DEPTH`, integers longer than
  Python converts (4,300 digits), lone UTF-16 surrogate escapes (``"\\ud800"``: text no tokenizer
  and no UTF-8 answer can hold).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = [
    "DONE",
    "MAX_JSON_DEPTH",
    "SSE_MEDIA_TYPE",
    "InvalidJSON",
    "SSEDecoder",
    "decode_request_json",
    "encode_event",
    "error_body",
    "error_bytes",
    "error_type_for",
    "event_data",
    "normalise_error_body",
    "one_line",
]

SSE_MEDIA_TYPE = "text/event-stream"
DONE = "[DONE]"  # the data of the event that ends an OpenAI stream

_TYPE_BY_STATUS = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "invalid_request_error", 405: "invalid_request_error", 408: "invalid_request_error",
    409: "invalid_request_error", 413: "invalid_request_error", 415: "invalid_request_error",
    422: "invalid_request_error", 429: "rate_limit_error", 431: "invalid_request_error",
    503: "service_unavailable_error",
}


def error_type_for(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status (``server_error`` for any other 5xx)."""
    known = _TYPE_BY_STATUS.get(status)
    if known is not None:
        return known
    return "invalid_request_error" if status < 500 else "server_error"


def error_body(message: str, *, type: str, code: str | int | None = None, param: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """The JSON body of an OpenAI-style error; ``extra`` adds fields to the ``error`` object
    (e.g. the gateway's ``incident_id``)."""
    return {"error": {"message": message, "type": type, "param": param, "code": code, **extra}}


def error_bytes(message: str, *, type: str, code: str | int | None = None, param: str | None = None) -> bytes:
    """:func:`error_body` encoded as JSON (UTF-8)."""
    return json.dumps(error_body(message, type=type, code=code, param=param), ensure_ascii=False).encode()


def one_line(text: str, limit: int = 300) -> str:
    """``text`` fit for one log line: line breaks escaped (a client's text cannot forge log lines), cut."""
    flat = text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")
    return flat if len(flat) <= limit else flat[:limit] + "..."


def normalise_error_body(raw: bytes, status: int, backend: str) -> bytes | None:
    """An upstream error body in OpenAI's shape ``{"error": {...}}``, or None when it already is.

    Backends answer errors in other shapes: vLLM's and SGLang's ``{"object": "error", "message"}``,
    a framework's ``{"detail": ...}``, a proxy's HTML page. OpenAI clients read ``error.message``;
    anything else reaches the caller as an error without a reason. The upstream's own text is kept
    only when it came as a JSON message (an HTML page is not passed on: it is not for the caller).
    """
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return None
    message: Any = None
    error_type: Any = "upstream_error"
    code: Any = None
    param: Any = None
    if isinstance(parsed, dict):
        message = parsed.get("message") if parsed.get("message") is not None else parsed.get("detail")
        if isinstance(parsed.get("error"), str):
            message = parsed["error"]
        error_type = parsed.get("type") if isinstance(parsed.get("type"), str) else error_type
        code, param = parsed.get("code"), parsed.get("param")
    if message is None or not isinstance(message, str | list | dict):
        message = f"backend {backend} answered HTTP {status} without an error message in OpenAI's format"
    elif not isinstance(message, str):
        message = json.dumps(message, ensure_ascii=False)
    body = error_body(message, type=error_type, param=param if isinstance(param, str) else None,
                      code=code if isinstance(code, str | int) else None)
    return json.dumps(body, ensure_ascii=False).encode()


MAX_JSON_DEPTH = 128  # arrays and objects inside each other; JSON schemas in tools nest, not this deep

# JSON may spell a UTF-16 surrogate as an escape; paired ones decode to one character, a lone one
# leaves a string that cannot be encoded as UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_PLAIN_DECODER = json.JSONDecoder()


class InvalidJSON(ValueError):
    """A request body that is not JSON a server should act on; ``code`` is the OpenAI error code."""

    def __init__(self, message: str, code: str = "invalid_json") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def decode_request_json(text: str, decoder: json.JSONDecoder | None = None) -> Any:
    """``decoder.decode(text)`` (a plain decoder by default); every way it should not be read is an
    :class:`InvalidJSON`, never an exception a server would answer with a 500. Other ``ValueError``
    subclasses the decoder's hooks raise (a repeated key, say) pass through."""
    try:
        data = (decoder or _PLAIN_DECODER).decode(text)
    except RecursionError:
        raise InvalidJSON(f"request body is nested too deeply (more than {MAX_JSON_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise InvalidJSON(f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise
        raise InvalidJSON("a number in the request body has more than 4300 digits") from None
    if _too_deep(text, data):
        raise InvalidJSON(f"request body is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    if _SURROGATE_ESCAPE.search(text) is not None and _has_lone_surrogate(data):
        raise InvalidJSON("request body contains a lone UTF-16 surrogate escape (e.g. \\ud83c without its pair); "
                          "send valid Unicode text", code="invalid_encoding")
    return data


def _too_deep(text: str, data: Any) -> bool:
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False  # not enough brackets to nest that deep: the common case, decided at C speed
    if not isinstance(data, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > MAX_JSON_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _has_lone_surrogate(data: Any) -> bool:
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def encode_event(payload: dict[str, Any] | str, *, event: str | None = None) -> bytes:
    """One server-sent event: ``data: <compact JSON or the string>`` and a blank line, after an
    ``event: <name>`` line when ``event`` is given (the Responses and Messages streams name each event)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    data = b"data: " + text.encode("utf-8") + b"\n\n"
    return data if not event else b"event: " + event.encode("utf-8") + b"\n" + data


class SSEDecoder:
    """Splits a server-sent-event byte stream into events (each the raw bytes of its lines)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._buffer += data
        while True:
            end, sep_len = _event_end(self._buffer)
            if end is None:
                return
            event, self._buffer = self._buffer[:end], self._buffer[end + sep_len:]
            if event.strip():
                yield event

    def rest(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest


def _event_end(buffer: bytes) -> tuple[int | None, int]:
    best: tuple[int | None, int] = (None, 0)
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = buffer.find(sep)
        if at != -1 and (best[0] is None or at < best[0]):
            best = (at, len(sep))
    return best


def event_data(event: bytes) -> str | None:
    """The joined ``data:`` lines of one event, or None for comment/keep-alive events."""
    lines = [line.rstrip(b"\r") for line in event.split(b"\n")]
    data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
    return b"\n".join(data).decode("utf-8") if data else None
