"""The one-call decode step (``DecodeStepKernel``) against the per-layer fused path, in one process.

Batch-1 decode of the SmolLM-135M-shaped model (48 tokens after a 32-token prompt, KV cache f16),
the step switched on and off between runs (alternating which goes first), ``--rounds`` runs each:
tok/s min / median, tokens per CPU-second (process time), and the ratio of medians.

    python bench/decode_step_ab.py --threads 2 --dtype bfloat16 --rounds 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kvfence.engine.config import kvfence_home
from kvfence.engine.kernels.decode_step import DecodeStepKernel
from kvfence_runs import DECODE_TOKENS, kvfence_decode, kvfence_llm
from throughput import build_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    llm = kvfence_llm(build_model(kvfence_home() / "bench" / "models"), args.dtype)
    takes = DecodeStepKernel.takes
    kvfence_decode(llm, 1, tokens=8)  # warm
    rates: dict[bool, list[float]] = {True: [], False: []}
    per_cpu: dict[bool, list[float]] = {True: [], False: []}
    load = [os.getloadavg()[0]]
    try:
        for i in range(args.rounds):
            for on in (True, False) if i % 2 == 0 else (False, True):
                DecodeStepKernel.takes = takes if on else (lambda self, x, meta: False)  # type: ignore[method-assign]
                cpu = time.process_time()
                rates[on].append(kvfence_decode(llm, 1))
                per_cpu[on].append(DECODE_TOKENS / (time.process_time() - cpu))
    finally:
        DecodeStepKernel.takes = takes  # type: ignore[method-assign]
    load.append(os.getloadavg()[0])
    print(f"{args.dtype} weights, {args.threads} thread(s), load {min(load):.1f}-{max(load):.1f}")
    for on, name in ((True, "one call"), (False, "per layer")):
        print(f"  {name:9}  tok/s {min(rates[on]):6.1f} / {statistics.median(rates[on]):6.1f}   "
              f"{statistics.median(per_cpu[on]):5.1f} tokens per CPU-second")
    print(f"  one call / per layer: {statistics.median(rates[True]) / statistics.median(rates[False]):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
