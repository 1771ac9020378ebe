"""Values hidden in base64 or hex: decode plausible runs, so the detectors can read what a model can.

A model decodes ``c2stcHJvai1BYkNk…`` or ``616c69636540…`` without being asked twice, so an e-mail
address or API key sent that way leaves the gateway unless the run is decoded and scanned.
:func:`decoded_runs` finds runs that could be base64 (standard or URL-safe) or hex, decodes each
(one level, never recursively) and keeps those whose bytes are text; the detector scans that text and
a finding replaces the whole encoded run. The cost is bounded: a run is decoded only when its first
:data:`PROBE_CHARS` characters decode to text, at most :data:`MAX_RUN_CHARS` of a run and
:data:`MAX_DECODED_CHARS` per text are decoded, so hashes, UUIDs, binary payloads (images in data
URIs, DER keys) and long identifiers cost one short failed probe each.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

__all__ = ["MAX_DECODED_CHARS", "MAX_RUN_CHARS", "MIN_RUN_CHARS", "PROBE_CHARS", "DecodedRun", "decoded_runs"]

# 16 base64 characters are 12 bytes ("ann@acme.io" is 11; shorter addresses and keys do not exist
# in practice). Shorter runs are words and ids, and each costs a probe.
MIN_RUN_CHARS = 16
PROBE_CHARS = 64
MAX_RUN_CHARS = 16_384
MAX_DECODED_CHARS = 65_536

_RUN = re.compile(rf"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{{{MIN_RUN_CHARS},}}={{0,2}}")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})+")
# Decoded bytes count as text when nearly all are printable (tabs and newlines included).
_MIN_PRINTABLE = 0.95
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")


@dataclass(frozen=True, slots=True)
class DecodedRun:
    """``text[start:end]`` of the scanned text reads as ``decoded`` (``encoding``: base64, hex, or
    ``concatenation``, whose ``joints`` are where one literal ends and the next begins in ``decoded``)."""

    start: int
    end: int
    decoded: str
    encoding: str
    joints: tuple[int, ...] = ()


def _texty(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # a probe may cut a multi-byte character at its end
        try:
            text = data[:-3].decode("utf-8") if len(data) > 3 else ""
        except UnicodeDecodeError:
            return None
    if not text:
        return None
    unprintable = len(_CONTROL.findall(text))  # in C: most probes fail here, on bytes that are no text
    return text if unprintable <= (1 - _MIN_PRINTABLE) * len(text) else None


def _b64(run: str) -> bytes | None:
    run = run.rstrip("=")
    if len(run) % 4 == 1:  # one character too many for any byte: not base64 as it stands
        run = run[:-1]
    if len(run) < 8:
        return None
    chunk = run + "=" * (-len(run) % 4)
    try:
        if "-" in chunk or "_" in chunk:
            return base64.urlsafe_b64decode(chunk)
        return base64.b64decode(chunk, validate=True)
    except (binascii.Error, ValueError):
        return None


def _hex(run: str) -> bytes | None:
    usable = len(run) - len(run) % 2
    if usable < MIN_RUN_CHARS or not _HEX.fullmatch(run[:usable]):
        return None
    return bytes.fromhex(run[:usable])


def _decode(run: str) -> tuple[str, str] | None:
    # hex first: every hex run is also valid base64, but a text in hex decodes to garbage in base64
    for encoding, decode in (("hex", _hex), ("base64", _b64)):
        probe = decode(run[:PROBE_CHARS])
        if probe is None or _texty(probe) is None:
            continue
        data = decode(run[:MAX_RUN_CHARS]) if len(run) > PROBE_CHARS else probe
        text = _texty(data) if data is not None else None
        if text is not None:
            return text, encoding
    return None


def decoded_runs(text: str) -> list[DecodedRun]:
    """The base64 / hex runs of ``text`` that decode to text, with what they decode to."""
    found: list[DecodedRun] = []
    budget = MAX_DECODED_CHARS
    for match in _RUN.finditer(text):
        run = match.group(0)
        # a run of letters only is a word or a name (base64 of text has digits, capitals mixed in)
        if run.isalpha() and (run.islower() or run.isupper()):
            continue
        decoded = _decode(run)
        if decoded is None:
            continue
        found.append(DecodedRun(match.start(), match.end(), decoded[0], decoded[1]))
        budget -= len(decoded[0])
        if budget <= 0:
            break
    return found
