"""Message framing between prefill and decode workers. Pure logic (bytes in, bytes out).

A message is a ZeroMQ multipart message: frame 0 is a small versioned header followed by a JSON
object (the message's fields); the remaining frames are raw payloads (KV page bytes)::

    frame 0:  b"KVFD" | version: u16 | kind: u8 | JSON fields (UTF-8)
    frame 1+: raw bytes

A frame that does not parse raises :class:`WireError`; a receiver treats it like any other
handoff mismatch (never as success).
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from kvfence.disagg.protocol import PROTOCOL_VERSION

__all__ = ["MAGIC", "Message", "MessageKind", "WireError", "decode", "encode"]

MAGIC = b"KVFD"
_HEADER = struct.Struct(">4sHB")
MAX_FIELDS_BYTES = 64 << 20  # a manifest of a very long prompt is still far below this


class MessageKind(enum.IntEnum):
    """Every message of the protocol; the direction is in the comment."""

    HELLO = 1  # decode -> prefill: who are you?
    WELCOME = 2  # prefill -> decode: instance id, model identity, layout, capacity
    SUBMIT = 3  # decode -> prefill: prefill this prompt
    REJECT = 4  # prefill -> decode: refused before anything was allocated (I3)
    MANIFEST = 5  # prefill -> decode: what the pages are (I4)
    PAGE = 6  # prefill -> decode: one page's K and V bytes, all layers
    COMMIT = 7  # prefill -> decode: all pages sent (a claim, verified by the receiver)
    ABORT = 8  # either way: this request is retired; drop everything of it


class WireError(ValueError):
    """A frame that is not a well-formed message of this protocol version."""


@dataclass
class Message:
    kind: MessageKind
    fields: dict[str, Any] = field(default_factory=dict)
    payloads: list[bytes] = field(default_factory=list)

    @property
    def request_id(self) -> str | None:
        rid = self.fields.get("request_id")
        return rid if isinstance(rid, str) else None


def encode(
    kind: MessageKind, fields: dict[str, Any] | None = None, payloads: list[bytes | memoryview] | None = None
) -> list[bytes | memoryview]:
    body = json.dumps(fields or {}, separators=(",", ":")).encode()
    return [_HEADER.pack(MAGIC, PROTOCOL_VERSION, int(kind)) + body, *(payloads or [])]


def decode(frames: list[bytes]) -> Message:
    if not frames:
        raise WireError("empty message")
    head = frames[0]
    if len(head) < _HEADER.size:
        raise WireError(f"header of {len(head)} bytes is too short")
    magic, version, kind = _HEADER.unpack_from(head)
    if magic != MAGIC:
        raise WireError(f"bad magic {magic!r}")
    if version != PROTOCOL_VERSION:
        raise WireError(f"protocol version {version}, this side speaks {PROTOCOL_VERSION}")
    try:
        message_kind = MessageKind(kind)
    except ValueError:
        raise WireError(f"unknown message kind {kind}") from None
    body = head[_HEADER.size :]
    if len(body) > MAX_FIELDS_BYTES:
        raise WireError(f"fields of {len(body)} bytes exceed {MAX_FIELDS_BYTES}")
    try:
        fields = json.loads(body) if body else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"fields are not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise WireError("fields are not a JSON object")
    return Message(message_kind, fields, [bytes(f) for f in frames[1:]])
