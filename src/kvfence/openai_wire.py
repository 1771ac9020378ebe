"""OpenAI's wire format, shared by ``kvfence serve`` and ``kvfence gateway``: the error body and the
server-sent-event framing of streamed answers. One home, so an error or a stream event reads the same
whichever part of kvfence (or which API adapter) wrote it.

- :func:`error_body` / :func:`error_bytes`: ``{"error": {"message", "type", "param", "code"}}``, the
  shape the official ``openai`` client turns into its exception classes;
- :func:`error_type_for`: the ``type`` OpenAI uses for an HTTP status;
- :func:`normalise_error_body`: an upstream's error in another shape (vLLM's ``{"object": "error"}``,
  ``{"detail": ...}``, an HTML page) rewritten into OpenAI's;
- :func:`encode_event`, :class:`SSEDecoder`, :func:`event_data`: ``data: ...`` events out and in
  (LF, CRLF and CR line ends, comments and keep-alives, as the SSE specification allows).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = [
    "DONE",
    "SSE_MEDIA_TYPE",
    "SSEDecoder",
    "encode_event",
    "error_body",
    "error_bytes",
    "error_type_for",
    "event_data",
    "normalise_error_body",
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


def encode_event(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <compact JSON or the string>`` and a blank line."""
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return b"data: " + text.encode("utf-8") + b"\n\n"


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
