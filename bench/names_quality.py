"""Recall and precision of PERSON and POSTAL_ADDRESS on a labelled corpus, per type and language,
with the findings on hard-negative texts.

    .venv/bin/python bench/names_quality.py [tests/data/pii_names.jsonl ...] [--json] [--show N]

Each row is ``{"id", "lang", "negative", "text", "spans": [[start, end, TYPE], ...]}`` (the
held-out corpus's shape); a ``.txt`` file is read as the dev-set markup of
``tests/data/names_dev.txt`` (``[[P:Priya Raman]]``, ``[[A:12 Baker Street, London NW1 6XE]]``,
a line starting ``!`` is a hard negative, ``#`` a comment, ``@de`` sets the language).

Matching (stated, and the same for every detector): only PERSON and POSTAL_ADDRESS are scored.

- a labelled span is *found* when one predicted span of its type covers at least half of it;
- a predicted span is *correct* when it lies at least half inside one labelled span of its type;
  recall = found / labelled, precision = correct / predicted;
- *exact* counts predictions whose bounds equal a labelled span's (after trimming spaces and
  trailing ``.,;:``), shown for information;
- every prediction of either type in a ``negative`` text is a hard-negative finding; the rules that
  made hard-negative findings and wrong predictions are counted by name (no text is printed unless
  ``--show`` asks for it).

The detector is the gateway's default (``build_detector()``: Presidio with kvfence's rules, the
offline names), each text scanned as a one-text request (``scan_all``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from kvfence.gateway.protection.detect.detector import build_detector  # noqa: E402

TYPES = ("PERSON", "POSTAL_ADDRESS")
_MARK = re.compile(r"\[\[([PA]):(.*?)\]\]", re.DOTALL)


def read_markup(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    lang = "en"
    block: list[str] = []

    def flush() -> None:
        if not block:
            return
        raw = "\n".join(block).replace("\\n", "\n")
        negative = raw.startswith("!")
        raw = raw[1:].lstrip() if negative else raw
        text, spans, pos = [], [], 0
        out_len = 0
        for m in _MARK.finditer(raw):
            text.append(raw[pos:m.start()])
            out_len += m.start() - pos
            value = m.group(2)
            spans.append([out_len, out_len + len(value), "PERSON" if m.group(1) == "P" else "POSTAL_ADDRESS"])
            text.append(value)
            out_len += len(value)
            pos = m.end()
        text.append(raw[pos:])
        rows.append({"id": f"dev-{len(rows)}", "lang": lang, "negative": negative, "text": "".join(text),
                     "spans": spans})
        block.clear()

    for line in path.read_text("utf-8").splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("@"):
            flush()
            lang = line[1:].strip()
            continue
        if not line.strip():
            flush()
            continue
        block.append(line)
    flush()
    return rows


def read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".txt":
        return read_markup(path)
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and (text[end - 1].isspace() or text[end - 1] in ".,;:"):
        end -= 1
    return start, end


def score(rows: list[dict[str, Any]], show: int = 0) -> dict[str, Any]:
    detector = build_detector()
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    negatives = {"texts": 0, "texts_with_findings": 0, "findings": 0}
    # which rule made the hard-negative findings and the wrong predictions: counts only, no text
    rules: dict[str, dict[str, int]] = {"hard_negative": defaultdict(int), "wrong": defaultdict(int)}
    misses: list[str] = []
    wrong: list[str] = []
    # per genre ("kind" of a row), totals only: PERSON found/labelled, hard-negative texts flagged/all
    by_kind: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        text = row["text"]
        found = [f for f in detector.scan_all([text])[0] if f.entity in TYPES]
        if row.get("negative"):
            negatives["texts"] += 1
            negatives["findings"] += len(found)
            negatives["texts_with_findings"] += bool(found)
            genre = by_kind[row.get("kind", "-")]
            genre["negatives"] += 1
            genre["negatives_flagged"] += bool(found)
            wrong.extend(f"NEG {row['id']} {f.entity}: {text[f.start:f.end]!r}" for f in found)
            for f in found:
                rules["hard_negative"][f.rule] += 1
            continue
        gold = [(s, e, t) for s, e, t in row["spans"] if t in TYPES]
        for kind in TYPES:
            g = [(s, e) for s, e, t in gold if t == kind]
            p = [(f.start, f.end) for f in found if f.entity == kind]
            for f in found:
                if f.entity == kind and not any(2 * _overlap((f.start, f.end), span) >= f.end - f.start for span in g):
                    rules["wrong"][f.rule] += 1
            if kind == "PERSON":
                genre = by_kind[row.get("kind", "-")]
                genre["person_labelled"] += len(g)
                genre["person_found"] += sum(1 for span in g if any(2 * _overlap(span, q) >= span[1] - span[0]
                                                                    for q in p))
            for lang in (row.get("lang", "en"), "all"):
                c = counts[(kind, lang)]
                c["labelled"] += len(g)
                c["predicted"] += len(p)
                c["found"] += sum(1 for span in g if any(2 * _overlap(span, q) >= span[1] - span[0] for q in p))
                c["correct"] += sum(1 for q in p if any(2 * _overlap(q, span) >= q[1] - q[0] for span in g))
                gt = {_trim(text, *span) for span in g}
                c["exact"] += sum(1 for q in p if _trim(text, *q) in gt)
            if show:
                misses.extend(f"MISS {row['id']} {kind}: {text[s:e]!r}" for s, e in g
                              if not any(2 * _overlap((s, e), q) >= e - s for q in p))
                wrong.extend(f"FP {row['id']} {kind}: {text[a:b]!r}" for a, b in p
                             if not any(2 * _overlap((a, b), span) >= b - a for span in g))
    table = []
    for (kind, lang), c in sorted(counts.items()):
        recall = c["found"] / c["labelled"] if c["labelled"] else None
        precision = c["correct"] / c["predicted"] if c["predicted"] else None
        table.append({"type": kind, "lang": lang, **c, "recall": recall, "precision": precision})
    detector.close()
    return {"by_type_lang": table, "hard_negatives": negatives, "rules": {k: dict(v) for k, v in rules.items()},
            "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
            "misses": misses[:show], "wrong": wrong[:show]}


def _fmt(x: float | None) -> str:
    return "  -  " if x is None else f"{x:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", nargs="*", type=Path, default=[REPO / "tests/data/pii_names.jsonl"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--by-kind", action="store_true", help="also print totals per genre (row kind)")
    parser.add_argument("--show", type=int, default=0, help="print up to N misses and wrong findings")
    args = parser.parse_args()
    rows = [row for path in args.corpus for row in read_rows(path)]
    result = score(rows, show=args.show)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{'type':15} {'lang':4} {'labelled':>8} {'predicted':>9} {'recall':>7} {'precision':>9} {'exact':>6}")
    for r in result["by_type_lang"]:
        print(f"{r['type']:15} {r['lang']:4} {r['labelled']:8d} {r['predicted']:9d} {_fmt(r['recall']):>7} "
              f"{_fmt(r['precision']):>9} {r['exact']:6d}")
    n = result["hard_negatives"]
    print(f"hard negatives: {n['texts']} texts, {n['texts_with_findings']} with findings, {n['findings']} findings")
    for kind, counts in result["rules"].items():
        if counts:
            print(f"rules of {kind.replace('_', '-')} findings: " + ", ".join(f"{r} {c}" for r, c in sorted(counts.items())))
    if args.by_kind:
        for genre, c in result["by_kind"].items():
            print(f"kind {genre:10} PERSON {c.get('person_found', 0):4d}/{c.get('person_labelled', 0):<4d} "
                  f"hard negatives flagged {c.get('negatives_flagged', 0)}/{c.get('negatives', 0)}")
    for line in result["misses"] + result["wrong"]:
        print(line)


if __name__ == "__main__":
    main()
