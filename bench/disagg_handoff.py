"""Disaggregated prefill/decode vs the colocated engine, same model, same prompts, same run.

Prints, for each: wall time, output tokens/s, mean and p50/p95 time to first token; for the
disaggregated path also the KV bytes handed over and the cost of verifying them (I4); and the
raw checksum speed of the page verification.

    .venv/bin/python bench/disagg_handoff.py --prompts 16 --prompt-len 256 --max-tokens 32
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from kvfence.disagg.config import DisaggConfig
from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.disagg.protocol import page_checksum
from kvfence.engine.config import EngineConfig
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.sampling.sampling_params import SamplingParams


def run(engine: Any, prompts: list[list[int]], params: SamplingParams) -> dict[str, float]:
    start = time.perf_counter()
    submitted: dict[str, float] = {}
    first: dict[str, float] = {}
    tokens = 0
    for i, p in enumerate(prompts):
        rid = f"b{i}"
        submitted[rid] = time.perf_counter()
        engine.add_request(rid, p, params, b"bench-scope")
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.new_token_ids and out.request_id not in first:
                first[out.request_id] = time.perf_counter()
            tokens += len(out.new_token_ids)
            if out.finished and out.finish_reason == "abort":
                raise RuntimeError(f"request {out.request_id} aborted")
    wall = time.perf_counter() - start
    ttft = sorted(first[r] - submitted[r] for r in submitted)
    return {"wall_s": wall, "tok_per_s": tokens / wall, "ttft_mean_ms": 1000 * statistics.mean(ttft),
            "ttft_p50_ms": 1000 * ttft[len(ttft) // 2], "ttft_p95_ms": 1000 * ttft[int(len(ttft) * 0.95) - 1]}


def checksum_speed(page_bytes: int, total_mb: int = 64) -> float:
    data = bytes(page_bytes)
    n = max(1, (total_mb << 20) // page_bytes)
    start = time.perf_counter()
    for i in range(n):
        page_checksum(data, request_id="bench", index=i, page_id=i, generation=0, key=b"k" * 32)
    return n * page_bytes / (time.perf_counter() - start) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N] (both processes use it)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--kv-cache-tokens", type=int, default=16384)
    args = ap.parse_args()
    config = EngineConfig(model=args.model, kv_cache_tokens=args.kv_cache_tokens,
                          max_model_len=max(2048, args.prompt_len + args.max_tokens), num_threads=args.threads,
                          device=args.device, dtype=args.dtype, max_num_batched_tokens=max(2048, 2 * args.prompt_len))
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    prompts = [[(i * 31 + j * 7) % 200 + 10 for j in range(args.prompt_len)] for i in range(args.prompts)]

    colocated = run(LLMEngine(config), prompts, params)
    with DisaggregatedEngine(DisaggConfig(engine=config)) as disagg:
        run(disagg, prompts[:2], params)  # warm-up: first forward passes on both sides
        disagg.handoff_failures.clear()
        result = run(disagg, [[t + 1 for t in p] for p in prompts], params)
        page_bytes = disagg.page_nbytes
        pages = sum(-(-len(p) // config.page_size) for p in prompts)
    print(f"{args.prompts} prompts x {args.prompt_len} tokens, {args.max_tokens} output tokens each, "
          f"{args.threads} torch thread(s) per process")
    for name, r in (("colocated LLMEngine", colocated), ("disaggregated (I4 verified)", result)):
        print(f"  {name:28s} wall {r['wall_s']:.2f} s  {r['tok_per_s']:.0f} tok/s  TTFT mean {r['ttft_mean_ms']:.0f} ms "
              f"p50 {r['ttft_p50_ms']:.0f} ms  p95 {r['ttft_p95_ms']:.0f} ms")
    print(f"  KV handed over: {pages} pages x {page_bytes} B = {pages * page_bytes / 2**20:.1f} MiB")
    print(f"  page checksum (keyed BLAKE2b): {checksum_speed(page_bytes):.0f} MiB/s")


if __name__ == "__main__":
    main()
