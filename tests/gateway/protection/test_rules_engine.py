"""Without a NER model the gateway's default detector runs kvfence's rules itself, not through Presidio
(so ``pip install kvfence`` needs no Presidio or spaCy): every corpus text gets the same findings both ways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvfence.gateway.protection.detect.detector import build_detector

DATA = Path(__file__).resolve().parents[2] / "data"


def test_rules_without_presidio_find_what_presidio_finds() -> None:
    pytest.importorskip("presidio_analyzer")
    through_presidio = build_detector(use_presidio=True)
    direct = build_detector()
    texts = [json.loads(line)["text"] for name in ("pii_corpus.jsonl", "pii_eu.jsonl", "pii_holdout.jsonl")
             for line in (DATA / name).read_text().splitlines() if line.strip()]
    assert len(texts) > 500
    for text in texts:
        expected = [(f.start, f.end, f.entity, f.category) for f in through_presidio.scan(text)]
        assert [(f.start, f.end, f.entity, f.category) for f in direct.scan(text)] == expected, text
