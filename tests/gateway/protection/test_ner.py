"""The optional NER path: a spaCy pipeline on disk (here: an entity ruler, built offline) adds PERSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfence.gateway.protection.detect.detector import build_detector
from kvfence.gateway.protection.detect.presidio_engine import _import_presidio


def test_names_from_a_local_spacy_pipeline(tmp_path: Path) -> None:
    _import_presidio()
    import spacy

    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "PERSON", "pattern": [{"LOWER": "maria"}, {"LOWER": "lopez"}]}])
    nlp.to_disk(tmp_path / "names")
    detector = build_detector(ner_model=tmp_path / "names")
    text = "Maria Lopez wrote from maria@northwind.com about the invoice."
    found = {(f.entity, text[f.start:f.end]) for f in detector.scan(text)}
    assert ("PERSON", "Maria Lopez") in found
    assert ("EMAIL_ADDRESS", "maria@northwind.com") in found
    detector.close()


def test_missing_ner_model_is_a_config_error(tmp_path: Path) -> None:
    from kvfence.errors import ConfigError

    with pytest.raises(ConfigError, match="spaCy pipeline"):
        build_detector(ner_model=tmp_path / "nope")
