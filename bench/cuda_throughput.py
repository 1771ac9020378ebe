"""kvfence vs transformers on a CUDA GPU, same random SmolLM-135M-shaped model, same process.

    python bench/cuda_throughput.py [float32|bfloat16]

Batch-1 decode tokens/s, and the issue's mixed workload (64 requests, prompts 64-512, outputs
64-256, seeded) with scrubbing on and off against transformers' static batching at 16, 32 and 64.
Needs a CUDA device; the CPU figures are `bench/throughput.py`'s.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams

PROMPT = list(range(65, 97))


def ours_decode(llm: LLM, n: int = 128) -> float:
    engine = llm.engine
    engine.add_request(f"decode-{time.monotonic_ns()}", PROMPT,
                       SamplingParams(max_tokens=n, temperature=0, ignore_eos=True), b"b" * 32)
    engine.step()
    torch.cuda.synchronize()
    start, steps = time.perf_counter(), 0
    while engine.has_unfinished_requests():
        engine.step()
        steps += 1
    torch.cuda.synchronize()
    return steps / (time.perf_counter() - start)


def hf_decode(model: Any) -> float:
    ids = torch.tensor([PROMPT], device="cuda")

    def run(n: int) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    run(4)
    return 127 / (run(128) - run(1))


def ours_mixed(model_dir: Path, dtype: str, jobs: list[tuple[list[int], int]], scrub: bool) -> float:
    llm = LLM(model=str(model_dir), kv_cache_tokens=sum(len(p) + n for p, n in jobs), max_model_len="auto",
              device="cuda", dtype=dtype, scrub=scrub, max_num_seqs=len(jobs), cache_scope="request")  # type: ignore[arg-type]
    params = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for _, n in jobs]
    llm.generate([p for p, _ in jobs[:4]], params[:4])  # warm-up
    torch.cuda.synchronize()
    start = time.perf_counter()
    outs = llm.generate([p for p, _ in jobs], params)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if sum(len(o.token_ids) for o in outs) != sum(n for _, n in jobs):
        raise RuntimeError("kvfence generated a different number of tokens than asked")
    return sum(n for _, n in jobs) / elapsed


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: see bench/throughput.py for the CPU figures", file=sys.stderr)
        return 2
    import transformers

    transformers.logging.set_verbosity_error()
    dtype = sys.argv[1] if len(sys.argv) > 1 else "float32"
    root = Path("/tmp/kvfence-cuda-bench")
    root.mkdir(exist_ok=True)
    model_dir = throughput.build_model(root)
    print(f"# {torch.cuda.get_device_name()}, {dtype}, SmolLM-135M-shaped random Llama")
    llm = LLM(model=str(model_dir), kv_cache_tokens=8192, max_model_len="auto", device="cuda", dtype=dtype,  # type: ignore[arg-type]
              max_num_seqs=1)
    ours = statistics.median(ours_decode(llm) for _ in range(3))
    del llm
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to("cuda").eval()
    theirs = hf_decode(hf)
    print(f"batch-1 decode kvfence {ours:.1f} tok/s, transformers {theirs:.1f} tok/s, ratio {ours / theirs:.2f}x")
    jobs = throughput.workload(64, (64, 512), (64, 256), seed=1)
    on = max(ours_mixed(model_dir, dtype, jobs, True) for _ in range(2))
    off = max(ours_mixed(model_dir, dtype, jobs, False) for _ in range(2))
    print(f"mixed kvfence scrub on {on:.1f} tok/s, off {off:.1f} tok/s, A/B {(off - on) / off:+.1%}")
    best = 0.0
    for bs in (16, 32, 64):
        rate = throughput.hf_static(hf, jobs, bs)
        best = max(best, rate)
        print(f"mixed transformers static batch {bs}: {rate:.1f} tok/s")
    print(f"mixed ratio kvfence / best transformers {on / best:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
