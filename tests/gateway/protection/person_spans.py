"""The PERSON spans the name rules give for a text, overlaps resolved as the detector resolves them:
the one view the person-rule tests compare against."""

from __future__ import annotations

from kvfence.gateway.protection.detect.findings import resolve_overlaps
from kvfence.gateway.protection.detect.recognizers.person import find_persons


def values(text: str) -> list[str]:
    return [text[f.start:f.end] for f in resolve_overlaps(find_persons(text))]
