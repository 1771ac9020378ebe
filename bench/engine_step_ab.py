"""The engine step's own cost, this checkout against an older one, on the same work in one run.

Runs one seeded continuous-batching workload through ``LLMEngine`` (the built-in random model) in a
fresh subprocess per run, alternating this tree's ``src`` and ``--old-src`` (e.g. a worktree of the
commit before the EngineCore step), ``--repeats`` times each. Prints generated tokens/s and engine
steps/s per run, min and median per tree, and the ratio of medians (this tree / old). The greedy
tokens of both trees are compared too: the step may not change a single token.

    git worktree add /tmp/old <commit> && python bench/engine_step_ab.py --old-src /tmp/old/src
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "src"

WORKER = r"""
import json, random, sys, time
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
cfg = json.loads(sys.argv[1])
llm = LLM(kv_cache_tokens=cfg["pool"], max_model_len="auto", page_size=16, device="cpu", num_threads=cfg["threads"])
engine = llm.engine
rng = random.Random(cfg["seed"])
vocab = engine.model_config.vocab_size
prompts = [[rng.randrange(5, vocab) for _ in range(rng.randint(cfg["min_prompt"], cfg["max_prompt"]))]
           for _ in range(cfg["requests"])]
params = SamplingParams(max_tokens=cfg["max_tokens"], temperature=0.0, ignore_eos=True)
scope = llm.scope_key(None)
llm.generate(prompts[:2], params)  # warm-up: kernels, allocator
for i, p in enumerate(prompts):
    engine.add_request(f"r{i}", p, params, scope)
steps, tokens, done = 0, 0, {}
start = time.perf_counter()
while engine.has_unfinished_requests():
    for out in engine.step():
        tokens += len(out.new_token_ids)
        if out.finished:
            done[out.request_id] = out.token_ids
    steps += 1
elapsed = time.perf_counter() - start
print(json.dumps({"tok_s": tokens / elapsed, "steps_s": steps / elapsed, "steps": steps,
                  "tokens": [done[f"r{i}"] for i in range(len(prompts))]}))
"""


def _run(src: Path, cfg: dict[str, int]) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", WORKER, json.dumps(cfg)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-src", type=Path, required=True, help="the src/ of the checkout to compare against")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    cfg = {"pool": 4096, "requests": args.requests, "min_prompt": 16, "max_prompt": 160,
           "max_tokens": args.max_tokens, "threads": args.threads, "seed": random.Random(0).randrange(1 << 30)}
    trees = {"this": HERE, "old": args.old_src.resolve()}
    runs: dict[str, list[dict[str, object]]] = {"this": [], "old": []}
    began = time.perf_counter()
    for i in range(args.repeats):
        for name in (("this", "old") if i % 2 == 0 else ("old", "this")):  # alternate who goes first
            r = _run(trees[name], cfg)
            runs[name].append(r)
            print(f"run {i + 1} {name:>4}: {r['tok_s']:8.2f} tok/s  {r['steps_s']:7.2f} steps/s  ({r['steps']} steps)")
    same = all(r["tokens"] == runs["old"][0]["tokens"] for rs in runs.values() for r in rs)
    med = {}
    for name, rs in runs.items():
        tok = [float(r["tok_s"]) for r in rs]  # type: ignore[arg-type]
        med[name] = statistics.median(tok)
        print(f"{name:>4}: tok/s min {min(tok):.2f} median {med[name]:.2f}")
    print(f"ratio this/old (median tok/s): {med['this'] / med['old']:.3f}; greedy tokens identical: {same}; "
          f"{args.requests} requests, prompts 16-160, {args.max_tokens} tokens each, {args.threads} threads; "
          f"run time {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
