"""The labelled corpus (tests/data/pii_corpus.jsonl) and the detector-quality targets on it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "data" / "pii_corpus.jsonl"


def _quality_module() -> Any:
    spec = importlib.util.spec_from_file_location("detector_quality", REPO / "bench" / "detector_quality.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["detector_quality"] = module
    spec.loader.exec_module(module)
    return module


def test_corpus_is_large_varied_and_well_formed() -> None:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    assert len(rows) >= 300
    assert {r["kind"] for r in rows} >= {"email", "chat", "ticket", "code", "log"}
    assert sum(1 for r in rows if not r["spans"]) >= 50  # texts with look-alikes only
    for row in rows:
        for start, end, label in row["spans"]:
            assert 0 <= start < end <= len(row["text"]) and label.isupper()


@pytest.mark.parametrize("private_ips", [False, True], ids=["default-policy", "private-ips"])
def test_recall_and_precision_targets_on_the_corpus(private_ips: bool) -> None:
    quality = _quality_module()
    rows = quality.load(CORPUS)
    if not private_ips:  # by default private / documentation addresses are no personal data: their labels go
        rows = quality.public_ip_labels_only(rows)
        assert sum(len(r["spans"]) for r in rows) < sum(len(r["spans"]) for r in quality.load(CORPUS))
    report = quality.score(rows, quality.kvfence_predictor(private_ips=private_ips), {"pii", "secret"})
    for category in ("pii", "secret"):
        metrics = report["per_category"][category]
        assert metrics["recall"] >= 0.95, (category, metrics, report["missed"])
        assert metrics["precision"] >= 0.9, (category, metrics, report["false_positives"])
    for entity, metrics in report["per_type"].items():
        assert metrics["recall"] >= 0.9, (entity, metrics)


def test_targets_on_the_european_corpus() -> None:
    """tests/data/pii_eu.jsonl: EU phones, Steuer-ID, NIR, dates of birth, addresses, and their look-alikes."""
    quality = _quality_module()
    rows = quality.load(REPO / "tests" / "data" / "pii_eu.jsonl")
    assert {t for r in rows for _, _, t in r["spans"]} >= {"PHONE_NUMBER", "DE_TAX_ID", "FR_NIR", "DATE_OF_BIRTH",
                                                          "POSTAL_ADDRESS"}
    assert sum(1 for r in rows if not r["spans"]) >= 50
    report = quality.score(rows, quality.kvfence_predictor(), {"pii"})
    metrics = report["per_category"]["pii"]
    assert metrics["recall"] >= 0.95 and metrics["precision"] >= 0.95, (metrics, report["missed"],
                                                                        report["false_positives"])
    for entity, per_type in report["per_type"].items():
        assert per_type["recall"] >= 0.9, (entity, per_type)
