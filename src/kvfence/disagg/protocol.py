"""The handoff manifest of invariant I4: what a prefill worker promises about the KV pages it sends.

Pure logic: no torch, no sockets, so every rule is tested on plain bytes.

A prefill worker that finished a prompt sends, per request, one :class:`Manifest` (request id,
prompt length and digest, scope digest, page size, one :class:`PageEntry` per page with the
sender's ledger generation and a checksum of the page's K and V bytes for all layers, the first
sampled token), then the page payloads, then a COMMIT. The decode side checks all of it
(:mod:`kvfence.disagg.handoff`) before it reads a single page.

Checksums are BLAKE2b-256 bound to the request id, the page index, the sender's page id and its
generation, so a page of another request (or of an older life of the same page) never verifies,
even when its bytes happen to be equal. With a shared handoff key (keyed BLAKE2b) they are also
a MAC: a man in the middle cannot forge a manifest or a page.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from kvfence.errors import KvfenceError

__all__ = [
    "CHECKSUM_SIZE",
    "MAX_KEY_SIZE",
    "PROTOCOL_VERSION",
    "HandoffError",
    "HandoffFailure",
    "Manifest",
    "PageEntry",
    "expected_page_count",
    "key_proof",
    "manifest_mac",
    "page_checksum",
    "prompt_digest",
    "scope_digest",
    "submit_mac",
]

PROTOCOL_VERSION = 1
CHECKSUM_SIZE = 32
MAX_KEY_SIZE = 64  # BLAKE2b's key limit


class HandoffFailure(enum.StrEnum):
    """Why a handoff was refused. Every one of them retires the request with an error (I4)."""

    REJECTED = "rejected"  # the prefill worker refused the request before allocating (I3)
    SENDER_ABORT = "sender_abort"  # the prefill worker sent an explicit ABORT
    TIMEOUT = "timeout"  # no verified handoff before the deadline: timeout means abort
    WORKER_LOST = "worker_lost"  # the prefill worker process went away
    WRONG_REQUEST = "wrong_request"  # manifest of another request (id, prompt or scope differ)
    BAD_MANIFEST = "bad_manifest"  # malformed manifest, wrong page size/length, bad MAC
    PAGE_COUNT = "page_count"  # page count != ceil(prompt_len / page_size)
    STALE_GENERATION = "stale_generation"  # a page generation older than (or reused from) one seen
    DUPLICATE = "duplicate"  # second manifest, page or commit for the same request
    OUT_OF_ORDER = "out_of_order"  # page or commit before the manifest
    MISSING_PAGE = "missing_page"  # commit while pages are missing
    BAD_PAGE = "bad_page"  # page header disagrees with the manifest or wrong payload size
    CHECKSUM = "checksum"  # the bytes in the decode pool do not match the manifest
    INTERNAL = "internal"  # an unexpected fault while handling the handoff (logged with its traceback)


class HandoffError(KvfenceError):
    """A handoff that did not verify (I4); the request is retired with this error, never answered."""

    def __init__(self, reason: HandoffFailure, message: str) -> None:
        super().__init__(f"KV handoff failed ({reason.value}): {message}")
        self.reason = reason
        self.message = message


def expected_page_count(prompt_len: int, page_size: int) -> int:
    """Pages that hold the KV of ``prompt_len`` tokens: ``ceil(prompt_len / page_size)``."""
    if prompt_len < 1 or page_size < 1:
        raise ValueError(f"prompt_len and page_size must be >= 1; got {prompt_len}, {page_size}")
    return math.ceil(prompt_len / page_size)


def _blake(person: bytes, key: bytes) -> Any:
    if len(key) > MAX_KEY_SIZE:
        raise ValueError(f"handoff key is {len(key)} bytes; at most {MAX_KEY_SIZE}")
    return hashlib.blake2b(digest_size=CHECKSUM_SIZE, key=key, person=person)


def _field(h: Any, data: bytes) -> None:
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)


def page_checksum(
    payload: bytes | memoryview, *, request_id: str, index: int, page_id: int, generation: int, key: bytes = b""
) -> bytes:
    """BLAKE2b-256 of one page's K and V bytes (all layers), bound to its request and ledger entry."""
    h = _blake(b"kvfence-kvpage", key)
    _field(h, request_id.encode())
    for number in (index, page_id, generation):
        h.update(number.to_bytes(8, "big", signed=True))
    h.update(len(payload).to_bytes(8, "big"))
    h.update(payload)  # no copy; hashlib releases the GIL here, so pages hash in parallel threads
    return bytes(h.digest())


def key_proof(key: bytes, instance_id: str) -> bytes:
    """Lets the two sides find out at connect time that their handoff keys differ (not the key)."""
    h = _blake(b"kvfence-keyproof", key)
    _field(h, instance_id.encode())
    return bytes(h.digest())


def prompt_digest(token_ids: Sequence[int]) -> bytes:
    """Digest of the prompt tokens, so a manifest is tied to the prompt it was computed for."""
    h = _blake(b"kvfence-prompt", b"")
    h.update(b"".join(t.to_bytes(8, "big", signed=True) for t in token_ids))
    return bytes(h.digest())


def scope_digest(scope_key: bytes) -> bytes:
    """Digest of the cache scope key (I5): manifests carry this, never the key itself."""
    h = _blake(b"kvfence-scope", b"")
    _field(h, scope_key)
    return bytes(h.digest())


@dataclass(frozen=True)
class PageEntry:
    """One page of a manifest: its place in the prompt, the sender's ledger entry, its checksum.

    ``shared`` marks a sealed prefix page on the sender: only such a page may appear in two
    manifests with the same generation.
    """

    index: int
    page_id: int
    generation: int
    shared: bool
    checksum: bytes


@dataclass(frozen=True)
class Manifest:
    """Everything a decode worker must verify before it reads a handed-over page (I4)."""

    request_id: str
    sender_id: str
    prompt_len: int
    prompt_digest: bytes
    scope_digest: bytes
    page_size: int
    page_nbytes: int
    first_token: int
    pages: tuple[PageEntry, ...]
    first_logprobs: dict[int, float] | None = None
    generator_state: bytes | None = None
    mac: bytes = b""

    @property
    def page_count(self) -> int:
        return len(self.pages)

    def body(self) -> dict[str, Any]:
        """The JSON-able fields covered by the MAC (everything but ``mac``)."""
        return {
            "request_id": self.request_id,
            "sender_id": self.sender_id,
            "prompt_len": self.prompt_len,
            "prompt_digest": self.prompt_digest.hex(),
            "scope_digest": self.scope_digest.hex(),
            "page_size": self.page_size,
            "page_nbytes": self.page_nbytes,
            "first_token": self.first_token,
            "first_logprobs": None
            if self.first_logprobs is None
            else [[tid, lp] for tid, lp in self.first_logprobs.items()],
            "generator_state": None if self.generator_state is None else self.generator_state.hex(),
            "pages": [
                [p.index, p.page_id, p.generation, p.shared, p.checksum.hex()] for p in self.pages
            ],
        }

    def signed(self, key: bytes = b"") -> Manifest:
        """A copy carrying the MAC of its body under ``key``."""
        return replace(self, mac=manifest_mac(self.body(), key))

    def to_wire(self) -> dict[str, Any]:
        return {**self.body(), "mac": self.mac.hex()}

    @classmethod
    def from_wire(cls, raw: Any) -> Manifest:
        """Parse and type-check a received manifest; anything malformed is BAD_MANIFEST."""
        try:
            if not isinstance(raw, dict):
                raise TypeError("not an object")
            pages = tuple(
                PageEntry(
                    index=_int(p[0]), page_id=_int(p[1]), generation=_int(p[2]),
                    shared=_bool(p[3]), checksum=_hex(p[4], CHECKSUM_SIZE),
                )
                for p in _list(raw["pages"])
            )
            logprobs_raw = raw.get("first_logprobs")
            logprobs = None if logprobs_raw is None else {
                _int(tid): float(lp) for tid, lp in _list(logprobs_raw)
            }
            state_raw = raw.get("generator_state")
            return cls(
                request_id=_str(raw["request_id"]),
                sender_id=_str(raw["sender_id"]),
                prompt_len=_int(raw["prompt_len"]),
                prompt_digest=_hex(raw["prompt_digest"], CHECKSUM_SIZE),
                scope_digest=_hex(raw["scope_digest"], CHECKSUM_SIZE),
                page_size=_int(raw["page_size"]),
                page_nbytes=_int(raw["page_nbytes"]),
                first_token=_int(raw["first_token"]),
                pages=pages,
                first_logprobs=logprobs,
                generator_state=None if state_raw is None else bytes.fromhex(_str(state_raw)),
                mac=_hex(raw["mac"], CHECKSUM_SIZE),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise HandoffError(HandoffFailure.BAD_MANIFEST, f"malformed manifest: {exc!r}") from exc

    def mac_is_valid(self, key: bytes = b"") -> bool:
        return hmac.compare_digest(self.mac, manifest_mac(self.body(), key))


def manifest_mac(body: dict[str, Any], key: bytes = b"") -> bytes:
    """Keyed BLAKE2b-256 over the canonical JSON of a manifest body (a plain digest without a key)."""
    h = _blake(b"kvfence-manifest", key)
    h.update(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    return bytes(h.digest())


def submit_mac(fields: dict[str, Any], key: bytes = b"") -> str:
    """Keyed BLAKE2b-256 (hex) of a SUBMIT's fields, ``mac`` left out, over their canonical JSON.

    A prefill worker computes prompts, seals prefix pages under the scope key a SUBMIT names and
    answers with their KV: only a peer that holds the handoff key may ask (I4, I5). The fields are
    canonicalised after a JSON round trip, so both sides hash the same text.
    """
    body = {k: v for k, v in fields.items() if k != "mac"}
    canonical = json.dumps(json.loads(json.dumps(body)), sort_keys=True, separators=(",", ":"))
    h = _blake(b"kvfence-submit", key)
    h.update(canonical.encode())
    return h.hexdigest()


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _hex(value: Any, size: int) -> bytes:
    data = bytes.fromhex(_str(value))
    if len(data) != size:
        raise ValueError(f"expected {size} bytes, got {len(data)}")
    return data
