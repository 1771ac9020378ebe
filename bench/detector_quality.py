"""Per-type recall and precision of kvfence's detectors on the labelled corpus, next to Presidio's
default pattern recognizers and detect-secrets alone, measured in the same run.

    .venv/bin/python bench/detector_quality.py [--corpus tests/data/pii_corpus.jsonl] [--json]

Matching: a prediction matches a true span of the same category (personal data or secret) when
they overlap by at least half of the longer of the two. Recall is per true type; precision per
predicted category (a detector's own type names differ, so precision by our type is not defined
for the peers). detect-secrets reports lines, so it is scored per line (a secret is found when its
line is reported; a reported line is right when it holds a secret). Presidio's default registry is run offline (blank spaCy pipeline, tldextract's
bundled suffix list) and only its entity types that have a counterpart in the corpus are counted
(DATE_TIME, URL, PERSON ... would otherwise count as false positives against labels we never drew).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

SECRET_TYPES = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWS_ACCESS_KEY", "AWS_SECRET_KEY", "GITHUB_TOKEN",
                "GITLAB_TOKEN", "SLACK_TOKEN", "STRIPE_KEY", "GOOGLE_API_KEY", "JWT", "PRIVATE_KEY",
                "CONNECTION_PASSWORD", "PASSWORD", "GENERIC_SECRET", "HUGGINGFACE_TOKEN", "SENDGRID_KEY", "NPM_TOKEN"}

# Presidio entity -> the corpus type it corresponds to.
PRESIDIO_MAP = {"EMAIL_ADDRESS": "EMAIL_ADDRESS", "PHONE_NUMBER": "PHONE_NUMBER", "CREDIT_CARD": "CREDIT_CARD",
                "IBAN_CODE": "IBAN_CODE", "IP_ADDRESS": "IP_ADDRESS", "US_SSN": "US_SSN", "UK_NHS": "UK_NHS",
                "UK_NINO": "UK_NINO", "CRYPTO": "CRYPTO_WALLET"}

Span = tuple[int, int, str]


def category(label: str) -> str:
    return "secret" if label in SECRET_TYPES else "pii"


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def matches(a: tuple[int, int], b: tuple[int, int], lenient: bool = False) -> bool:
    overlap = min(a[1], b[1]) - max(a[0], b[0])
    if lenient:
        return overlap > 0
    return overlap > 0 and overlap >= 0.5 * max(a[1] - a[0], b[1] - b[0])


def score(rows: list[dict[str, Any]], predict: Callable[[str], list[Span]], categories: set[str],
          lenient: bool = False) -> dict[str, Any]:
    hits: dict[str, int] = defaultdict(int)
    totals: dict[str, int] = defaultdict(int)
    tp: dict[str, int] = defaultdict(int)
    predicted: dict[str, int] = defaultdict(int)
    false_examples: list[str] = []
    missed_examples: list[str] = []
    started = time.perf_counter()
    for row in rows:
        text = row["text"]
        truth = [(s, e, t) for s, e, t in row["spans"] if category(t) in categories]
        preds = [p for p in predict(text) if category(p[2]) in categories]
        for s, e, t in truth:
            totals[t] += 1
            if any(category(p[2]) == category(t) and matches((s, e), (p[0], p[1]), lenient) for p in preds):
                hits[t] += 1
            elif len(missed_examples) < 25:
                missed_examples.append(f"{t}: {text[s:e]!r}")
        for p in preds:
            cat = category(p[2])
            predicted[cat] += 1
            if any(category(t) == cat and matches((s, e), (p[0], p[1]), lenient) for s, e, t in truth):
                tp[cat] += 1
            elif len(false_examples) < 25:
                false_examples.append(f"{p[2]}: {text[p[0]:p[1]]!r}")
    elapsed = time.perf_counter() - started
    per_type = {t: {"recall": hits[t] / totals[t], "support": totals[t]} for t in sorted(totals)}
    per_cat = {}
    for cat in sorted(categories):
        support = sum(totals[t] for t in totals if category(t) == cat)
        found = sum(hits[t] for t in totals if category(t) == cat)
        per_cat[cat] = {"recall": found / support if support else None,
                        "precision": tp[cat] / predicted[cat] if predicted[cat] else None,
                        "support": support, "predicted": predicted[cat]}
    return {"per_type": per_type, "per_category": per_cat, "seconds": elapsed,
            "false_positives": false_examples, "missed": missed_examples}


# Types this corpus never labels: the texts hold names ("Maria", "Noah Mensah") that are personal
# data but were not drawn as spans, so a PERSON finding is neither right nor wrong here (it is
# scored on tests/data/pii_names.jsonl by bench/names_quality.py), as for Presidio's PERSON above.
UNLABELLED = frozenset({"PERSON"})


def kvfence_predictor(*, private_ips: bool = False) -> Callable[[str], list[Span]]:
    from kvfence.gateway.protection.detect.detector import build_detector

    detector = build_detector(private_ips=private_ips)
    return lambda text: [(f.start, f.end, f.entity) for f in detector.scan(text) if f.entity not in UNLABELLED]


def public_ip_labels_only(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The corpus as the default policy reads it: addresses in private, loopback and documentation
    ranges are not personal data (``gateway.protection.private_ips: false``), so their labels go."""
    import ipaddress

    def personal(text: str, span: list[Any]) -> bool:
        start, end, label = span
        if label != "IP_ADDRESS":
            return True
        try:
            return ipaddress.ip_address(text[start:end]).is_global
        except ValueError:
            return True

    return [{**row, "spans": [s for s in row["spans"] if personal(row["text"], s)]} for row in rows]


def presidio_predictor() -> Callable[[str], list[Span]]:
    import tldextract

    from kvfence.gateway.protection.detect.presidio_engine import _import_presidio, blank_pipeline

    _import_presidio()
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import SpacyNlpEngine
    from presidio_analyzer.recognizer_registry import RecognizerRegistry

    # Presidio's e-mail recognizer asks tldextract, which would fetch the public suffix list over
    # the network; use the snapshot bundled with tldextract instead (offline, same answers).
    offline = tldextract.TLDExtract(suffix_list_urls=())
    tldextract.extract = offline  # type: ignore[assignment]
    engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": str(blank_pipeline())}])
    engine.load()
    registry = RecognizerRegistry()
    registry.load_predefined_recognizers(nlp_engine=engine, languages=["en"])
    analyzer = AnalyzerEngine(nlp_engine=engine, registry=registry, supported_languages=["en"])
    entities = sorted(PRESIDIO_MAP)

    def predict(text: str) -> list[Span]:
        results = analyzer.analyze(text, language="en", entities=entities)
        return [(r.start, r.end, PRESIDIO_MAP[r.entity_type]) for r in results if r.entity_type in PRESIDIO_MAP]

    return predict


def detect_secrets_predictor() -> Callable[[str], list[Span]]:
    """detect-secrets as its CLI runs it (`detect-secrets scan FILE`): default plugins and filters; one
    span per reported line."""
    import os
    import tempfile

    from detect_secrets import SecretsCollection
    from detect_secrets.settings import default_settings

    def predict(text: str) -> list[Span]:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
            handle.write(text)
        try:
            collection = SecretsCollection()
            with default_settings():
                collection.scan_file(handle.name)
        finally:
            os.unlink(handle.name)
        lines = text.split("\n")
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line) + 1)
        spans: list[Span] = []
        for line_number in sorted({secret.line_number for _, secret in collection}):
            if 0 < line_number <= len(lines):
                spans.append((starts[line_number - 1], starts[line_number - 1] + len(lines[line_number - 1]),
                              "GENERIC_SECRET"))
        return spans

    return predict


def evaluate(corpus: Path) -> dict[str, Any]:
    rows = load(corpus)
    return {
        "texts": len(rows),
        # default policy: private / documentation IP addresses are not personal data (labels dropped)
        "kvfence": score(public_ip_labels_only(rows), kvfence_predictor(), {"pii", "secret"}),
        # `private_ips: true`: every IP address is, as the corpus labels them
        "kvfence_private_ips": score(rows, kvfence_predictor(private_ips=True), {"pii"}),
        "presidio_default": score(rows, presidio_predictor(), {"pii"}),
        # detect-secrets reports lines (and for some plugins only a prefix of the token as the value),
        # so it is scored per line: a secret counts as found if its line is reported.
        "detect_secrets": score(rows, detect_secrets_predictor(), {"secret"}, lenient=True),
    }


def scan_files(pattern: str, limit: int, seed: int = 1) -> None:
    """Out-of-corpus check: what the detectors flag in real files (e.g. installed libraries' code)."""
    import glob
    import random
    from collections import Counter, defaultdict

    files = sorted(glob.glob(pattern, recursive=True))
    random.Random(seed).shuffle(files)
    files = files[:limit]
    predict = kvfence_predictor()
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    size = 0
    for path in files:
        try:
            text = Path(path).read_text(errors="ignore")[:60000]
        except OSError:
            continue
        size += len(text)
        for start, end, entity in predict(text):
            counts[entity] += 1
            if len(examples[entity]) < 5:
                examples[entity].append(text[max(0, start - 30):end + 10].replace("\n", " "))
    print(f"{len(files)} files, {size} characters: {dict(counts)}")
    for entity, samples in examples.items():
        print(f"  {entity}: {samples}")


def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=REPO / "tests" / "data" / "pii_corpus.jsonl")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--examples", action="store_true", help="print missed spans and false positives")
    parser.add_argument("--scan-files", metavar="GLOB", help="instead: count what is flagged in these files")
    parser.add_argument("--limit", type=int, default=700)
    args = parser.parse_args()
    if args.scan_files:
        scan_files(args.scan_files, args.limit)
        return
    report = evaluate(args.corpus)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"corpus: {args.corpus} ({report['texts']} texts)\n")
    systems = ("kvfence", "kvfence_private_ips", "presidio_default", "detect_secrets")
    types = sorted({t for s in systems for t in report[s]["per_type"]})
    print(f"{'type':22} {'support':>7}  " + "  ".join(f"{s:>19}" for s in systems) + "   (recall)")
    for t in types:
        support = "/".join(sorted({str(report[s]["per_type"][t]["support"]) for s in systems
                                   if t in report[s]["per_type"]}))
        cells = [_fmt(report[s]["per_type"][t]["recall"]) if t in report[s]["per_type"] else "n/a"
                 for s in systems]
        print(f"{t:22} {support:>7}  " + "  ".join(f"{c:>19}" for c in cells))
    print()
    for s in systems:
        for cat, m in report[s]["per_category"].items():
            print(f"{s:19} {cat:6} recall {_fmt(m['recall'])}  precision {_fmt(m['precision'])}  "
                  f"(support {m['support']}, predicted {m['predicted']}, {report[s]['seconds']:.2f}s)")
    if args.examples:
        for s in systems:
            print(f"\n{s} missed: {report[s]['missed']}\n{s} false positives: {report[s]['false_positives']}")


if __name__ == "__main__":
    main()
