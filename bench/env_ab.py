"""A/B of one environment switch on the mixed workload of ``bench/throughput.py``, in one process.

Runs kvfence's continuous batching over the bench's seeded workload (same model, same engine
settings as ``throughput.ours_mixed``) with the variable set to each value in turn, the order
alternating by round (A B, B A, A B, ...) so that neither arm always follows the other, a fresh
engine per run (so switches read when the engine builds its model or kernels take effect). Prints
per run the wall time, the process CPU time (all threads) and tokens/s, then per arm the best and
the median, and whether every run generated the same tokens (greedy, ``ignore_eos``).

On a shared machine read the process CPU time and the same-round ratios; wall time there says how
busy the machine was.

    python bench/env_ab.py --env KVFENCE_PACKED_WEIGHTS --values 1,0 --rounds 3 --threads 2
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

import torch

import throughput  # bench/, on sys.path when run as a script
from kvfence.engine.config import EngineConfig, kvfence_home
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key


def run_once(model_dir: Path, jobs: list[tuple[list[int], int]], kv_cache_dtype: str) -> tuple[float, float, list[list[int]]]:
    """Wall seconds, process CPU seconds and each request's tokens for one run over ``jobs``."""
    pool = sum(len(p) + n for p, n in jobs)
    engine = LLMEngine(EngineConfig(
        model=str(model_dir), kv_cache_tokens=pool, max_model_len="auto", device="cpu", scrub=True,
        max_num_seqs=len(jobs), kv_cache_dtype=kv_cache_dtype,  # type: ignore[arg-type]
    ))
    tenant, secret = TenantIdentity(organization="bench"), secrets.token_bytes(32)
    tokens: dict[str, list[int]] = {}
    t, c = time.perf_counter(), time.process_time()
    for i, (prompt, n) in enumerate(jobs):
        engine.add_request(f"mixed-{i}", prompt, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True),
                           compute_scope_key(tenant, CacheScope.REQUEST, secret))
        tokens[f"mixed-{i}"] = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.request_id].extend(out.new_token_ids)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return wall, cpu, [tokens[f"mixed-{i}"] for i in range(len(jobs))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True, help="the environment variable switched")
    ap.add_argument("--values", default="1,0", help="comma-separated values, one arm each (default 1,0)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each runs every arm once (default 2)")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--kv-cache-dtype", choices=("auto", "bfloat16", "float16"), default="auto")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    values = args.values.split(",")
    model_dir = throughput.build_model(kvfence_home() / "bench")
    jobs = throughput.workload(args.requests, (64, 512), (64, 256), seed=1)
    total = sum(n for _, n in jobs)
    print(f"# {args.env} in {values}: {args.requests} requests ({total} tokens), {torch.get_num_threads()} torch "
          f"threads, kv_cache_dtype={args.kv_cache_dtype}, load average {os.getloadavg()[0]:.1f}")
    os.environ[args.env] = values[0]
    run_once(model_dir, [(p, min(n, 8)) for p, n in jobs], args.kv_cache_dtype)  # warm-up, as the bench
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in values}
    reference: list[list[int]] | None = None
    same = True
    for round_index in range(args.rounds):
        for value in values if round_index % 2 == 0 else values[::-1]:
            os.environ[args.env] = value
            wall, cpu, tokens = run_once(model_dir, jobs, args.kv_cache_dtype)
            reference = tokens if reference is None else reference
            same = same and tokens == reference
            results[value].append((wall, cpu))
            print(f"round {round_index + 1} {args.env}={value}: {wall:7.2f} s wall {cpu:7.2f} s process CPU "
                  f"{total / wall:7.2f} tok/s  (load average {os.getloadavg()[0]:.1f})", flush=True)
    for value, runs in results.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"{args.env}={value}: wall best {min(walls):.2f} s ({total / min(walls):.2f} tok/s) median "
              f"{statistics.median(walls):.2f} s; process CPU best {min(cpus):.2f} s median {statistics.median(cpus):.2f} s")
    print(f"tokens identical in every run: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
