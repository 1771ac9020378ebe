"""What the fused CPU layer kernel buys a Llama layer, i.e. what Qwen3 and Gemma 3 (which run op by op:
q/k norms, Gemma's other steps) do without: batch-1 decode of the SmolLM-shaped model with the
fused kernel and with the per-op path (the same kernels' ``linear`` / ``rms_norm`` / RoPE, no fusion),
runs interleaved, min / median of each and the ratio.

    python bench/fused_layer_ab.py --threads 2 --decode-tokens 16 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

import throughput  # bench/, on sys.path when run as a script
from kvfence.engine.config import kvfence_home
from kvfence.engine.llm import LLM
from kvfence.engine.models.llama import LlamaDecoderLayer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--decode-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = throughput.build_model(kvfence_home() / "bench", "smollm")
    llm = LLM(model=str(model_dir), kv_cache_tokens=4096, max_model_len=2048, device="cpu", max_num_seqs=1)
    layers = [m for m in llm.engine.runner.model.modules() if isinstance(m, LlamaDecoderLayer)]
    prompt = list(range(65, 65 + 32))
    runs: dict[bool, list[float]] = {True: [], False: []}
    for i in range(args.repeats):
        for fused in ((True, False) if i % 2 == 0 else (False, True)):
            for layer in layers:
                layer._fusable = fused
                layer.drop_fused_kernel()
            runs[fused].append(throughput.ours_decode(llm, prompt, args.decode_tokens))
    for fused, label in ((True, "fused layer kernel"), (False, "per-op path (Qwen3 / Gemma 3)")):
        r = runs[fused]
        print(f"batch-1 decode, {label:32s} min {min(r):7.2f}  median {statistics.median(r):7.2f} tok/s")
    print(f"fused / per-op (medians) {statistics.median(runs[True]) / statistics.median(runs[False]):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
