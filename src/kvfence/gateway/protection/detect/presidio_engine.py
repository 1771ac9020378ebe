"""Presidio's AnalyzerEngine, offline: a blank spaCy pipeline built locally, our pattern rules.

Nothing is downloaded. The spaCy pipeline is ``spacy.blank("en")`` saved once to a cache directory
(or a NER pipeline the operator already has on disk, for PERSON). Pattern rules do not need tokens
or lemmas, so without a NER model the analyzer is handed empty NLP artifacts and never tokenises:
only the precompiled regex path runs (that is what keeps 1k tokens well under a millisecond per rule).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvfence.errors import ConfigError
from kvfence.gateway.protection.detect.findings import Category, Finding
from kvfence.gateway.protection.detect.scanner import Rule, RuleSet

__all__ = ["PresidioPiiDetector", "blank_pipeline", "build_analyzer", "default_cache_dir"]

_LOCK = threading.RLock()


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvfence" / "spacy"


def blank_pipeline(cache_dir: Path | None = None) -> Path:
    """Path of a blank English spaCy pipeline on disk, building it on first use (no download)."""
    _import_presidio()  # spaCy comes with it, without torch
    import spacy

    target = (cache_dir or default_cache_dir()) / "blank_en"
    with _LOCK:
        if not (target / "config.cfg").exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix="blank_en.", dir=target.parent))
            spacy.blank("en").to_disk(staging)
            # If another process won the race, its copy is as good as ours.
            with contextlib.suppress(OSError):
                staging.rename(target)
    return target


_HEAVY_OPTIONAL = ("torch", "transformers")


@contextlib.contextmanager
def _without_ml_frameworks() -> Iterator[None]:
    """Import Presidio without its optional torch/transformers NLP engines.

    Presidio (and thinc under spaCy) import transformers and torch at import time when they are
    installed, only to offer NLP engines we never use: 15-30 s and ~1 GB for a gateway that runs
    regexes. Marking them absent while Presidio is first imported makes those imports fail softly,
    as Presidio intends when they are not installed; the marks are removed afterwards, so later
    imports elsewhere in the process work normally. A module already imported is left alone.
    """
    blocked = [name for name in _HEAVY_OPTIONAL if name not in sys.modules]
    if "presidio_analyzer" in sys.modules or not blocked:
        yield
        return
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name) is None:
                del sys.modules[name]


def _import_presidio() -> None:
    with _LOCK, _without_ml_frameworks():
        import presidio_analyzer
        import presidio_analyzer.nlp_engine  # noqa: F401


def _recognizer_class() -> type:
    _import_presidio()
    from presidio_analyzer import LocalRecognizer, RecognizerResult

    class RuleRecognizer(LocalRecognizer):  # type: ignore[misc]
        """All kvfence pattern rules as one Presidio recognizer, so shared anchors are found once."""

        def __init__(self, rules: list[Rule]) -> None:
            self._rules = RuleSet(rules)
            entities = sorted({rule.entity for rule in rules})
            super().__init__(supported_entities=entities, name="kvfence_patterns", supported_language="en")

        def load(self) -> None:
            return None

        def analyze(self, text: str, entities: list[str], nlp_artifacts: Any = None) -> list[Any]:
            wanted = set(entities or self.supported_entities)
            return [
                RecognizerResult(entity_type=f.entity, start=f.start, end=f.end, score=f.score,
                                 recognition_metadata={RecognizerResult.RECOGNIZER_NAME_KEY: f.rule,
                                                       RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id})
                        for f in self._rules.raw_findings(text) if f.entity in wanted
            ]

    return RuleRecognizer


def _no_context_enhancer_class() -> type:
    from presidio_analyzer.context_aware_enhancers import ContextAwareEnhancer

    class NoContextEnhancer(ContextAwareEnhancer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(context_similarity_factor=0.0, min_score_with_context_similarity=0.0,
                             context_prefix_count=0, context_suffix_count=0)

        def enhance_using_context(self, text: str, raw_results: list[Any], nlp_artifacts: Any,
                                  recognizers: list[Any], context: list[str] | None = None) -> list[Any]:
            return raw_results

    return NoContextEnhancer


def _NoContextEnhancer() -> Any:
    return _no_context_enhancer_class()()


def build_analyzer(rules: list[Rule], *, ner_model: Path | None = None, cache_dir: Path | None = None) -> Any:
    """An AnalyzerEngine whose registry holds ``rules`` (and spaCy NER for PERSON with ``ner_model``)."""
    _import_presidio()
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import SpacyRecognizer
    from presidio_analyzer.recognizer_registry import RecognizerRegistry

    model_path = ner_model if ner_model is not None else blank_pipeline(cache_dir)
    try:
        nlp_engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": str(model_path)}])
        nlp_engine.load()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the spaCy pipeline at {model_path}: {exc}") from exc
    recognizers = [_recognizer_class()(rules)]
    if ner_model is not None:
        recognizers.append(SpacyRecognizer(supported_language="en", supported_entities=["PERSON"]))
    registry = RecognizerRegistry(recognizers=recognizers, supported_languages=["en"])
    # Our rules weigh their own context words; Presidio's lemma enhancer would only deep-copy every
    # result (most of the analyzer's time on long prompts) to find no lemmas in a blank pipeline.
    enhancer = None if ner_model is not None else _NoContextEnhancer()
    return AnalyzerEngine(nlp_engine=nlp_engine, registry=registry, supported_languages=["en"],
                          context_aware_enhancer=enhancer)


class PresidioPiiDetector:
    """Personal-data detection through Presidio with kvfence's pattern rules; thread-safe after init."""

    def __init__(self, rules: list[Rule], *, ner_model: Path | None = None, cache_dir: Path | None = None,
                 score_threshold: float = 0.5) -> None:
        self._analyzer = build_analyzer(rules, ner_model=ner_model, cache_dir=cache_dir)
        self._uses_nlp = ner_model is not None
        self._threshold = score_threshold
        # Artifacts of the empty text: no tokens, no entities; handed to Presidio instead of
        # tokenising each prompt, which pattern rules never look at.
        self._no_nlp = self._analyzer.nlp_engine.process_text("", "en")

    def detect(self, text: str) -> list[Finding]:
        if not text:
            return []
        results = self._analyzer.analyze(
            text, language="en", score_threshold=self._threshold,
            nlp_artifacts=None if self._uses_nlp else self._no_nlp,
        )
        findings = []
        for result in results:
            metadata = result.recognition_metadata or {}
            rule = str(metadata.get("recognizer_name", "presidio"))
            findings.append(Finding(result.start, result.end, result.entity_type, Category.PII,
                                    float(result.score), rule))
        return findings
