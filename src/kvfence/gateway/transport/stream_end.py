"""Did a relayed stream reach its end, or was it cut short? Decided once, at the end, from its tail.

A relayed stream (``stream_out``: the upstream's bytes go out as they came, no event is parsed) still
must not pass a cut-short answer as complete. A chunked or length-framed body cut short is an error at
the HTTP level already; a body framed by closing the connection, or one whose framing ends cleanly too
early, looks complete there. What tells them apart is the stream's own end: the last event is
``[DONE]``, or a chunk with a ``finish_reason`` (some servers never send ``[DONE]``), or an error event,
possibly followed by a usage-only chunk or comments; and the body stops at an event boundary.

:class:`StreamTail` keeps only the last reads (a few list operations per read, no parsing), so the hot
path pays nothing per event; the one decision at the end reads events from the last one backwards and
stops at the first that decides.
"""

from __future__ import annotations

import collections
import json
from typing import Any

from kvfence.openai_wire import event_data

__all__ = ["CUT_SHORT_MESSAGE", "StreamTail", "chunk_ends_stream", "stream_is_complete"]

CUT_SHORT_MESSAGE = "the stream ended without a finish_reason or [DONE]: the answer may be cut short"
# What is kept of a stream's end: the decisive events (finish chunk, usage chunk, [DONE]) are a few KB;
# more is kept so a large last chunk (long logprobs) is still read whole.
_KEEP_BYTES = 64 * 1024
_TRIM_AT = 2 * _KEEP_BYTES  # trimmed now and then, not on every read
# An empty line after a line end: LF LF, LF CRLF (so CRLF CRLF too), CR CR.
_SEPARATORS = (b"\n\n", b"\n\r\n", b"\r\r")


class StreamTail:
    """Relays a stream in whole events and keeps its last ``_KEEP_BYTES`` (or more: whole pieces).

    :meth:`take` returns what of a read may go out now: up to the read's last event boundary; an
    unfinished event is held back until the read that completes it (so a stream cut inside an event
    never passes the fragment on, and the error event that follows it is an event of its own).
    :meth:`end` decides once, at the end."""

    __slots__ = ("_held", "_pieces", "_size")

    def __init__(self) -> None:
        self._pieces: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._held: list[bytes] = []  # an unfinished event's pieces

    def take(self, data: bytes) -> bytes:
        """What of ``data`` (with what was held) ends at an event boundary: to be sent now."""
        held = self._held
        if not held and data.endswith(b"\n\n"):  # most reads end an event: the hot path, kept short
            self._pieces.append(data)
            self._size += len(data)
            if self._size > _TRIM_AT:
                self._trim()
            return data
        # a separator may start in what was held: look at its last two bytes too
        joint = b"".join(held[-2:])[-2:] if held else b""
        cut = max(_last_boundary(joint + data) - len(joint), 0)
        if cut == 0:
            if data:
                held.append(data)  # a large event over many reads: joined once, when it is whole
            return b""
        whole = b"".join([*held, data[:cut]]) if held else data[:cut]
        held.clear()
        if cut < len(data):
            held.append(data[cut:])
        self._keep(whole)
        return whole

    def _keep(self, data: bytes) -> None:
        self._pieces.append(data)
        self._size += len(data)
        if self._size > _TRIM_AT:
            self._trim()

    def _trim(self) -> None:
        pieces = self._pieces
        while self._size - len(pieces[0]) >= _KEEP_BYTES:
            self._size -= len(pieces.popleft())

    def ended(self) -> bool:
        """Whether what went through :meth:`take` so far ends the stream (nothing held back): a
        client that hangs up after this has had the whole answer."""
        return not self._held and bool(self._pieces) and stream_is_complete(b"".join(self._pieces))

    def end(self, tail: bytes) -> tuple[bytes, bool]:
        """The stream's framing says it is over: (what is left to send, whether the stream is complete).
        An incomplete stream's unfinished last event is not sent."""
        out = self.take(tail) if tail else b""
        held = b"".join(self._held)
        self._held.clear()
        if held.strip():
            if stream_is_complete(b"".join(self._pieces) + held):
                # a whole last event without its blank line: sent with one, so every client reads it
                return out + held + _blank_line_after(held), True
            return out, False
        return out, stream_is_complete(b"".join(self._pieces))


def _blank_line_after(event: bytes) -> bytes:
    """What ends ``event`` (which lacks its blank line) in its own line-end style."""
    if event.endswith(b"\r\n"):
        return b"\r\n"
    if event.endswith((b"\n", b"\r")):
        return event[-1:]
    return b"\n\n"


def _last_boundary(data: bytes) -> int:
    """Where the last whole event of ``data`` ends (0: none). SSE ends lines with LF, CRLF or CR."""
    best = 0
    for separator in _SEPARATORS:
        at = data.rfind(separator)
        if at >= 0 and at + len(separator) > best:
            best = at + len(separator)
    return best


def stream_is_complete(tail: bytes) -> bool:
    """Whether ``tail``, the end of an SSE stream cut at an event boundary in front, ends the stream."""
    if b"\r" in tail:  # one line-end style (SSE allows CRLF, LF and CR, mixed); event_data strips any \r left
        tail = tail.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    events = tail.split(b"\n\n")
    last = events.pop()  # what follows the last blank line: empty unless the body stopped inside an event
    if last.strip():
        # The body stopped inside its last event: cut, unless that event is whole all the same and ends
        # the stream (a server that writes "data: [DONE]\n" or a last chunk without its blank line)
        return _verdict(last) is True
    for event in reversed(events):  # from the end: usually [DONE] decides at once
        if event.strip():
            verdict = _verdict(event)
            if verdict is not None:
                return verdict
    return False


def _verdict(event: bytes) -> bool | None:
    """True: this event ends a stream; False: a stream cannot end here; None: it says nothing."""
    try:
        data = event_data(event)
    except UnicodeDecodeError:
        return False
    if data is None:
        return None  # a comment / keep-alive
    if data.strip() == "[DONE]":
        return True
    try:
        chunk: Any = json.loads(data)
    except ValueError:
        return False
    if not isinstance(chunk, dict):
        return False
    if chunk_ends_stream(chunk):
        return True
    if not chunk.get("choices"):
        return None if "usage" in chunk else False  # the usage-only chunk after the last one
    return False


def chunk_ends_stream(chunk: dict[str, Any]) -> bool:
    """Whether a decoded stream chunk ends its stream: an error event (the backend said why it stops)
    or a choice with a ``finish_reason``. Used by the relay's end check and the decoded path alike."""
    if chunk.get("error") is not None or chunk.get("object") == "error":
        return True
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(isinstance(c, dict) and c.get("finish_reason") is not None
                                             for c in choices)
