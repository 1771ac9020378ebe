"""CPU cost of the request-side detector scan (``Detector.scan``), this tree against an older one, in
the same run: two long-lived worker processes, one per tree, measured in turns (A, B, A, B ...), best
of N CPU times per text, so load from other processes hits both alike.

    .venv/bin/python bench/scan_cost_ab.py [--baseline-rev 2d53f85] [--repeats 7] [--chars 128000]

Texts (each about ``--chars`` characters, ~4 characters per token): the labelled corpora mixed
(ASCII), the same with accents, no-break spaces and a few look-alike letters, Cyrillic and Greek
prose, and code / JSON tool arguments with string literals, escapes and base64 blobs. Reported:
CPU ms per text and per 1k tokens for both trees, and the ratio. The detector is the gateway's
default (Presidio with kvfence's rules, no NER model).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
from kvfence.gateway.protection.detect.detector import build_detector
texts = json.load(open(sys.argv[1]))
detector = build_detector()
detector.scan("warm up jane@example.org")
print("ready", flush=True)
for line in sys.stdin:
    name = line.strip()
    started = time.process_time()
    detector.scan(texts[name])
    print(json.dumps({"name": name, "cpu_ms": (time.process_time() - started) * 1000}), flush=True)
"""


def _corpus_texts() -> list[str]:
    rows: list[str] = []
    for name in ("pii_corpus.jsonl", "pii_holdout.jsonl", "pii_eu.jsonl"):
        path = REPO / "tests" / "data" / name
        rows += [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]
    return rows


def _fill(pieces: list[str], chars: int, rng: random.Random) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        piece = rng.choice(pieces)
        out.append(piece)
        size += len(piece) + 1
    return "\n".join(out)[:chars]


def make_texts(chars: int, seed: int = 5) -> dict[str, str]:
    rng = random.Random(seed)
    corpus = _corpus_texts()
    accented = [t.replace("e", "é", 1).replace(" ", "\u00a0", 2).replace("o", "\u043e", 1) for t in corpus]
    prose = ["Привет! Встреча назначена на 10:30, договор № 12345 подписан, сумма 4 500 рублей.",
             "Совет директоров обсудил отчёт; Σήμερα είναι Δευτέρα και η συνάντηση είναι στις 9.",
             "Пожалуйста, пришлите документы до пятницы. Ευχαριστώ πολύ για τη βοήθεια σας."]
    code = ['msg = "Hello, " + name + "!"  # greet', 'url = "https://example.org/a%20b?q=1&x=%2F"',
            json.dumps({"path": "C:\\users\\docs", "note": "caf\u00e9 \u2013 ok", "n": 3}),
            f'blob = "{base64.b64encode(bytes(range(200))).decode()}"',
            f'doc = "{base64.b64encode(b"an ordinary sentence, nothing secret in it at all").decode()}"',
            "sha = '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'",
            "label = 'Total: ' + str(total) + ' items'", "html = '&lt;b&gt;&#169; 2024&lt;/b&gt;'"]
    return {"corpus_ascii": _fill(corpus, chars, rng), "corpus_nonascii": _fill(accented, chars, rng),
            "cyrillic_greek_prose": _fill(prose, chars, rng), "code_json": _fill(code + corpus[:50], chars, rng)}


def _baseline_src(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


class Worker:
    def __init__(self, src: Path, texts_file: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, str(texts_file)], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"worker for {src} did not start")

    def measure(self, name: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline())["cpu_ms"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", default="2d53f85", help="git revision of the older tree")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--chars", type=int, default=128_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    texts = make_texts(args.chars)
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts))
        trees = {"baseline": _baseline_src(args.baseline_rev, Path(tmp)), "this tree": REPO / "src"}
        workers = {label: Worker(src, texts_file) for label, src in trees.items()}
        best: dict[tuple[str, str], float] = {}
        try:
            for _ in range(args.repeats):
                for name in texts:
                    for label, worker in workers.items():
                        ms = worker.measure(name)
                        best[(label, name)] = min(ms, best.get((label, name), ms))
        finally:
            for worker in workers.values():
                worker.close()
    rows = [{"text": name, "chars": len(texts[name]),
             **{label: round(best[(label, name)], 1) for label in trees},
             **{f"{label} ms/1k tok": round(best[(label, name)] / (len(texts[name]) / 4000), 2) for label in trees}}
            for name in texts]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"Detector.scan CPU ms, best of {args.repeats}, baseline {args.baseline_rev} vs this tree, same run")
    print(f"{'text':22} {'chars':>7} {'baseline':>9} {'this':>9} {'base/1k':>8} {'this/1k':>8} {'ratio':>6}")
    for row in rows:
        base, this = row["baseline"], row["this tree"]
        print(f"{row['text']:22} {row['chars']:>7} {base:>9.1f} {this:>9.1f} {row['baseline ms/1k tok']:>8.2f} "
              f"{row['this tree ms/1k tok']:>8.2f} {this / base:>6.2f}")


if __name__ == "__main__":
    main()
