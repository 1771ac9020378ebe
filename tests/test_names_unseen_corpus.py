"""The second names corpus (tests/data/pii_names_unseen.jsonl) is what its generator writes, and its
labels are well formed. No detector is run here: the corpus is for scoring, not for tests to tune to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
CORPUS = DATA / "pii_names_unseen.jsonl"
GENERATOR = DATA / "make_names_unseen.py"
TYPES = {"PERSON", "POSTAL_ADDRESS"}


@pytest.mark.parametrize("hash_seed", ["0", "12345"])
def test_the_file_on_disk_is_what_the_generator_writes(hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hard negatives" in done.stdout


def test_every_row_is_well_formed() -> None:
    rows = [json.loads(line) for line in CORPUS.read_text("utf-8").splitlines()]
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert set(r) == {"id", "kind", "lang", "negative", "text", "spans"}, r["id"]
        assert r["lang"] in {"en", "de", "fr", "es", "it", "nl"}
        if r["negative"]:
            assert r["spans"] == [], r["id"]
            continue
        assert r["spans"], r["id"]
        end = 0
        for start, stop, kind in r["spans"]:
            assert kind in TYPES
            assert end <= start < stop <= len(r["text"]), r["id"]
            value = r["text"][start:stop]
            assert value == value.strip() and value[-1] not in ".,;:", (r["id"], value)
            end = stop
    positives = [r for r in rows if not r["negative"]]
    assert len(positives) >= 250 and len(rows) - len(positives) >= 150
    assert 0.2 <= sum(r["lang"] != "en" for r in positives) / len(positives) <= 0.3
