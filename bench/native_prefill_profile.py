"""Where the native runtime's prefill time goes: ``perf record`` over one child process that runs a
ppN prefill step (``NativeRunner.execute``, SmolLM-135M-shaped random checkpoint of
``bench/throughput.py``, float16 KV pool) a few times, its samples in the step kernel's library split
into the products (``linear_w`` / ``linear_typed`` and the tiles of ``broadcast_gemm.h``), attention
(``paged_attention.h``), OpenMP's waiting (libgomp) and the rest (norms, RoPE, SiLU, K/V writes).
Needs ``perf`` (user-space sampling: ``perf_event_paranoid`` <= 2).

    flock /tmp/kvfence-bench.lock python bench/native_prefill_profile.py --dtypes float32,bfloat16 --threads 1,2 --tokens 128,512
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_GROUPS = (
    ("products", r"rows_broadcast|tile|linear_w|linear_typed|widen|rows<|rows_by|rows_single|block<|pack"),
    ("attention", r"attend|weighted_rows|run_tasks|paged_decode"),
)


def child(model_dir: Path, dtype: str, threads: int, tokens: int, repeats: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from kvfence.engine.core.scheduler import ScheduledSeq
    from native_runtime import _runner, _sequences

    runner = _runner("native", model_dir, dtype, threads)
    pages = -(-tokens // 16) + 1
    rates = []
    for i in range(repeats + 1):  # the first one warms up
        (p,) = _sequences(1, tokens, first_page=(i % 8) * pages, pages_each=pages)
        start = time.perf_counter()
        runner.execute([ScheduledSeq(p, 0, tokens, True)])
        if i:
            rates.append(tokens / (time.perf_counter() - start))
    print(f"pp{tokens} best {max(rates):.1f} tok/s")


def split(data: Path) -> dict[str, float]:
    report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,symbol", "--stdio", "-q"],
                            capture_output=True, text=True, check=True).stdout
    shares: collections.Counter[str] = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3)
        if "libgomp" in dso:
            shares["omp wait"] += pct
        elif "decode_f32" in dso:
            shares[next((g for g, pattern in _GROUPS if re.search(pattern, sym)), "rest")] += pct
    total = sum(shares.values())
    return {g: 100 * v / total for g, v in shares.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tokens", default="128,512")
    ap.add_argument("--model-root", type=Path, default=None)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], int(args.child[2]), int(args.child[3]), 4 if int(args.child[3]) > 256 else 16)
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from kvfence.engine.config import kvfence_home
    from throughput import build_model

    model_dir = build_model(args.model_root or kvfence_home() / "bench" / "models")
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes.split(","):
            for threads in args.threads.split(","):
                for tokens in args.tokens.split(","):
                    data = Path(tmp) / "perf.data"
                    done = subprocess.run(["perf", "record", "-q", "-F", "1999", "-o", str(data), sys.executable, __file__,
                                           "--child", str(model_dir), dtype, threads, tokens],
                                          capture_output=True, text=True, check=True)
                    shares = split(data)
                    cells = "  ".join(f"{g} {shares.get(g, 0.0):4.1f} %" for g in ("products", "attention", "rest", "omp wait"))
                    print(f"{dtype:8s} {threads} thread(s) {done.stdout.strip().splitlines()[-1]:24s} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
