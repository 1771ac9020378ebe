"""CPU cost of the names and the new address rules: the gateway's scan with them next to the same
scan without them (what the gateway ran before issue #19), in one process, alternating, repeated.

    .venv/bin/python bench/names_cost.py [--repeats 7] [--chars 64000]

Texts (~``--chars`` characters each, ~4 characters per token): the labelled PII corpora mixed
(pii_corpus, pii_holdout, pii_eu: e-mails, tickets, logs with some names), the names dev set
(tests/data/names_dev.txt: dense with names and addresses), and code / JSON. Each detector scans a
text as a one-text request (``scan_all``: names linked across the request). Reported: CPU ms per
1k tokens, min and median of the repeats, for both, and the ratio of the minima.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

from kvfence.gateway.protection.detect.detector import Detector, build_detector  # noqa: E402
from kvfence.gateway.protection.detect.recognizers.address_intl import INTL_ADDRESS_RULES  # noqa: E402
from names_quality import read_markup  # noqa: E402


def _fill(pieces: list[str], chars: int, rng: random.Random) -> str:
    out, size = [], 0
    while size < chars:
        piece = rng.choice(pieces)
        out.append(piece)
        size += len(piece) + 1
    return "\n".join(out)[:chars]


def texts(chars: int) -> dict[str, str]:
    rng = random.Random(5)
    corpus = [json.loads(line)["text"] for name in ("pii_corpus.jsonl", "pii_holdout.jsonl", "pii_eu.jsonl")
              for line in (REPO / "tests/data" / name).read_text().splitlines() if line.strip()]
    dev = [row["text"] for row in read_markup(REPO / "tests/data/names_dev.txt")]
    code = ['def total(items):\n    return sum(i.price for i in items)  # v1.2.3',
            json.dumps({"name": "gateway", "replicas": 3, "image": "kvfence:0.1", "env": {"LOG": "info"}}),
            'logger.info("user %s logged in from %s", user_id, ip)', "for (let i = 0; i < n; i++) { acc += xs[i]; }"]
    return {"pii_corpora": _fill(corpus, chars, rng), "names_dev": _fill(dev, chars, rng),
            "code_json": _fill(code + corpus[:30], chars, rng)}


def cpu_ms(detector: Detector, text: str) -> float:
    started = time.process_time()
    detector.scan_all([text])
    return (time.process_time() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--chars", type=int, default=64_000)
    args = parser.parse_args()
    before = build_detector(disabled=["PERSON", *(rule.name for rule in INTL_ADDRESS_RULES)])
    after = build_detector()
    for d in (before, after):
        d.scan_all(["warm up: Dr. Priya Raman, jane@example.org, Via Roma 1, 00100 Roma"])
    print(f"{'text':12} {'before min':>10} {'median':>7} {'after min':>9} {'median':>7} {'ratio':>6}  (CPU ms per 1k tokens)")
    for name, text in texts(args.chars).items():
        per_1k = len(text) / 4 / 1000
        runs: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.repeats):
            runs["before"].append(cpu_ms(before, text) / per_1k)
            runs["after"].append(cpu_ms(after, text) / per_1k)
        b, a = runs["before"], runs["after"]
        print(f"{name:12} {min(b):10.2f} {statistics.median(b):7.2f} {min(a):9.2f} {statistics.median(a):7.2f} "
              f"{min(a) / min(b):6.2f}")


if __name__ == "__main__":
    main()
