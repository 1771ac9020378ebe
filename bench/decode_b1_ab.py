"""Batch-1 decode of the SmolLM-135M-shaped model: this tree, an older tree and llama.cpp, alternated.

One round per repeat, in this order or its reverse (alternating by round): this checkout's kvfence
in a fresh process, ``--old-src``'s kvfence in a fresh process (e.g. ``git archive main src`` into
/tmp), llama.cpp's ``llama-bench -n 48 -r 3`` when ``--llama-cpp`` (built by ``bench/vs_llamacpp.py``
once), and the memory roofline (a ``sum()`` over 1 GiB at that thread count over the weight bytes of a
token). Each kvfence process decodes 48 tokens after a 32-token prompt, ``--runs`` times, and reports
the median tok/s and its tokens per CPU-second (process time: a spinning OpenMP worker counts).
KV cache f16 on both sides (as ``bench/vs_llamacpp.py``). Prints min / median per side and the ratios.

    python bench/decode_b1_ab.py --dtype bfloat16 --threads 1,2 --repeats 3 [--old-src /tmp/old/src] [--llama-cpp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kvfence.engine.config import kvfence_home
from throughput import build_model, measure_bandwidth
from vs_llamacpp import GGUF_TYPE, WEIGHT_BYTES, _param_count, build_llama_cpp, llama_bench, write_gguf

HERE = Path(__file__).resolve().parent.parent / "src"

WORKER = r"""
import json, statistics, sys, time
import torch
torch.set_num_threads(int(sys.argv[2]))
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
# vs_llamacpp.py's kvfence_llm / kvfence_decode, inlined so that an older tree runs its own engine only
llm = LLM(model=sys.argv[1], dtype=sys.argv[3], device="cpu", kv_cache_tokens=8192, kv_cache_dtype="float16",
          max_num_batched_tokens=2048, max_prefill_chunk=512)

def decode(tokens):
    engine = llm.engine
    params = SamplingParams(max_tokens=tokens + 1, temperature=0, ignore_eos=True)
    engine.add_request("d0", [j % 200 + 10 for j in range(32)], params, b"b" * 32)
    while any(len(o.token_ids) == 0 for o in engine.step()):
        pass
    start, generated = time.perf_counter(), 0
    while engine.has_unfinished_requests():
        generated += len(engine.step())
    return generated / (time.perf_counter() - start)

decode(8)  # warm: first products, scratch, page faults
rates, per_cpu = [], []
for _ in range(int(sys.argv[4])):
    cpu = time.process_time()
    rates.append(decode(48))
    per_cpu.append(48 / (time.process_time() - cpu))
from kvfence.engine.kernels.library import cpu_kernels
lib = cpu_kernels()
kind = {"float32": 0, "bfloat16": 1, "float16": 2}[sys.argv[3]]
try:  # batch-1's prefetch distance, chosen by timing (trees from 2026-12-02 on)
    ahead = lib.kvfence_prefetch_bytes(kind, -2) if lib is not None else None
except AttributeError:
    ahead = None
print(json.dumps({"tok_s": statistics.median(rates), "tok_per_cpu_s": statistics.median(per_cpu), "prefetch": ahead}))
"""


def kvfence_run(src: Path, model_dir: Path, dtype: str, threads: int, runs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-c", WORKER, str(model_dir), str(threads), dtype, str(runs)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kvfence run ({src}) failed:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _fmt(values: list[float]) -> str:
    return f"{min(values):6.1f} / {statistics.median(values):6.1f}" if values else "     - /      -"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(GGUF_TYPE))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--runs", type=int, default=4, help="timed decodes per kvfence process (median)")
    ap.add_argument("--old-src", type=Path, default=None, help="an older tree's src/ to run alternated")
    ap.add_argument("--llama-cpp", action="store_true")
    args = ap.parse_args()
    model_dir = build_model(kvfence_home() / "bench" / "models")
    params = _param_count(model_dir)
    tree = None
    if args.llama_cpp:
        tree, why = build_llama_cpp(kvfence_home() / "bench" / "llama.cpp")
        print(f"llama.cpp: {why if tree is None else tree}")
    gguf = write_gguf(tree, model_dir, args.dtype) if tree is not None else None
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.dtype} weights, f16 KV")
    for threads in (int(t) for t in args.threads.split(",")):
        sides: dict[str, list[float]] = {"new": [], "old": [], "llama.cpp": [], "roof": []}
        cpu: dict[str, list[float]] = {"new": [], "old": []}
        prefetch: dict[str, list[object]] = {"new": [], "old": []}
        loads = []
        for i in range(args.repeats):
            order = ["new", "old", "llama.cpp"] if i % 2 == 0 else ["llama.cpp", "old", "new"]
            for side in order:
                if side in ("new", "old"):
                    src = HERE if side == "new" else args.old_src
                    if src is None:
                        continue
                    got = kvfence_run(src, model_dir, args.dtype, threads, args.runs)
                    sides[side].append(got["tok_s"])
                    prefetch[side].append(got.get("prefetch"))
                    cpu[side].append(got["tok_per_cpu_s"])
                elif tree is not None and gguf is not None:
                    sides[side].append(llama_bench(tree, gguf, threads)["decode_b1"])
            torch.set_num_threads(threads)
            sides["roof"].append(measure_bandwidth(repeats=3) / (params * WEIGHT_BYTES[args.dtype]))
            loads.append(os.getloadavg()[0])
        roof = statistics.median(sides["roof"])
        print(f"\n{threads} thread(s): roofline {roof:.1f} tok/s; load {min(loads):.1f}-{max(loads):.1f}; "
              f"tok/s min / median of {args.repeats}")
        for side in ("new", "old", "llama.cpp"):
            if not sides[side]:
                continue
            line = f"  {side:10} {_fmt(sides[side])}  {statistics.median(sides[side]) / roof:4.0%} of roofline"
            if cpu.get(side):
                line += f"; {statistics.median(cpu[side]):.1f} tokens per CPU-second"
            if any(p is not None for p in prefetch.get(side, [])):
                line += f"; prefetch chosen {prefetch[side]} B"
            if side != "llama.cpp" and sides["llama.cpp"]:
                line += f"; {statistics.median(sides[side]) / statistics.median(sides['llama.cpp']):.2f}x llama.cpp"
            print(line)
        if sides["old"] and sides["new"]:
            print(f"  new / old {statistics.median(sides['new']) / statistics.median(sides['old']):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
