"""Where kvfence's mixed-workload time goes: steps with prefill vs decode-only steps, and per piece.

Runs the workload of ``bench/throughput.py`` (same seed, same model, same engine settings) once
untimed (outputs cut to 8 tokens, as the bench's warm-up) and once timed, with wall and CPU-time
probes around the engine's pieces: the step kinds, the forward pass, the LM head, sampling, the
decoder layers run op by op (prefill-sized batches: torch's products), the fused decode halves
(``pre``: norm, qkv, RoPE; ``post``: o_proj ... down), decode attention's kernel, the prefill
attention (SDPA). Probes nest (the forward pass holds the layers), so the rows do not add up.

The probes are wrappers around those functions (a few microseconds per call); the rate printed is
thus a little below the bench's. Thread CPU time is the main thread's only: run with ``--threads 1``
for a breakdown in CPU time that a busy machine distorts least; process CPU time covers every thread.

    python bench/profile_mixed.py --requests 24 --threads 1 [--kv-cache-dtype bfloat16]
"""

from __future__ import annotations

import argparse
import collections
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import throughput  # bench/, on sys.path when run as a script
from kvfence.engine.config import EngineConfig, kvfence_home
from kvfence.engine.core import llm_engine
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.kernels import fused_layer
from kvfence.engine.layers import attention
from kvfence.engine.models import llama
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key

WALL: dict[str, float] = collections.defaultdict(float)
CPU: dict[str, float] = collections.defaultdict(float)
CALLS: dict[str, int] = collections.defaultdict(int)


def probe(owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper that books its wall and thread CPU time under ``label``."""
    fn: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            WALL[label] += time.perf_counter() - t
            CPU[label] += time.thread_time() - c
            CALLS[label] += 1

    setattr(owner, name, timed)


def install_probes() -> None:
    probe(llama.LlamaForCausalLM, "forward", "forward pass (all layers)")
    probe(llama.LlamaForCausalLM, "compute_logits", "LM head")
    probe(llm_engine, "sample", "sampling")
    probe(llama.LlamaDecoderLayer, "forward_per_op", "layers op by op (prefill steps)")
    probe(llama, "linear", "  products op by op (torch/MKL) + LM head")
    probe(attention.F, "scaled_dot_product_attention", "  prefill attention (SDPA)")
    probe(fused_layer.DecoderLayerKernel, "pre", "fused pre (norm, qkv, RoPE)")
    probe(fused_layer.DecoderLayerKernel, "post", "fused post (o, norm, gate_up, down)")
    probe(attention, "paged_decode_f32", "decode attention kernel")


def run(model_dir: Path, jobs: list[tuple[list[int], int]], kv_cache_dtype: str) -> dict[str, Any]:
    pool = sum(len(p) + n for p, n in jobs)
    engine = LLMEngine(EngineConfig(
        model=str(model_dir), kv_cache_tokens=pool, max_model_len="auto", device="cpu", scrub=True,
        max_num_seqs=len(jobs), kv_cache_dtype=kv_cache_dtype,  # type: ignore[arg-type]
    ))
    tenant, secret = TenantIdentity(organization="bench"), secrets.token_bytes(32)
    for i, (prompt, n) in enumerate(jobs):
        engine.add_request(f"mixed-{i}", prompt, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True),
                           compute_scope_key(tenant, CacheScope.REQUEST, secret))
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    schedule = engine.scheduler.schedule
    last: dict[str, str] = {}

    def classify(*args: Any, **kwargs: Any) -> Any:
        out = schedule(*args, **kwargs)
        last["kind"] = "steps with prefill" if any(it.num_new_tokens != 1 for it in out.items) else "decode-only steps"
        return out

    engine.scheduler.schedule = classify  # type: ignore[method-assign]
    generated = 0
    t, c = time.perf_counter(), time.process_time()
    while engine.has_unfinished_requests():
        ts, cs = time.perf_counter(), time.process_time()
        for out in engine.step():
            generated += len(out.new_token_ids)
        row = kinds[last.get("kind", "idle steps")]
        row[0] += 1
        row[1] += time.perf_counter() - ts
        row[2] += time.process_time() - cs
    return {"generated": generated, "wall": time.perf_counter() - t, "cpu": time.process_time() - c, "kinds": kinds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--kv-cache-dtype", choices=("auto", "bfloat16", "float16"), default="auto")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = throughput.build_model(kvfence_home() / "bench")
    jobs = throughput.workload(args.requests, (64, 512), (64, 256), seed=1)
    install_probes()
    run(model_dir, [(p, min(n, 8)) for p, n in jobs], args.kv_cache_dtype)  # warm-up, as the bench
    for table in (WALL, CPU, CALLS):
        table.clear()
    res = run(model_dir, jobs, args.kv_cache_dtype)
    print(f"# mixed workload, {args.requests} requests, {torch.get_num_threads()} torch threads, "
          f"kv_cache_dtype={args.kv_cache_dtype}, with probes")
    print(f"{res['generated']} tokens in {res['wall']:.2f} s wall, {res['cpu']:.2f} s process CPU: "
          f"{res['generated'] / res['wall']:.1f} tok/s")
    for kind, (n, wall, cpu) in res["kinds"].items():
        print(f"  {kind:40s} {int(n):5d} steps {wall:8.2f} s wall {cpu:8.2f} s process CPU")
    for label in sorted(WALL, key=lambda k: -WALL[k]):
        print(f"  {label:40s} {CALLS[label]:5d} calls {WALL[label]:8.2f} s wall {CPU[label]:8.2f} s thread CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
