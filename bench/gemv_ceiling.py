"""The ceiling torch's own fp32 matrix-vector products reach on this CPU for a SmolLM-135M shape.

Batch-1 decode reads every weight once per token; this runs only those matmuls (30 layers of fused
qkv, o, gate-up and down projections, then the 49152-row LM head), with no attention, norms or
Python engine around them. Its tokens/s is what any torch-based engine can reach here at best, to
set beside the bandwidth roofline that `bench/throughput.py` prints.

    .venv/bin/python bench/gemv_ceiling.py [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

LAYERS, HIDDEN, INTERMEDIATE, VOCAB, KV = 30, 576, 1536, 49152, 192


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=20)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    layers = [
        (torch.randn(HIDDEN + 2 * KV, HIDDEN, generator=gen), torch.randn(HIDDEN, HIDDEN, generator=gen),
         torch.randn(2 * INTERMEDIATE, HIDDEN, generator=gen), torch.randn(HIDDEN, INTERMEDIATE, generator=gen))
        for _ in range(LAYERS)
    ]
    lm_head = torch.randn(VOCAB, HIDDEN, generator=gen)
    x = torch.randn(1, HIDDEN, generator=gen)  # x: [B=1, D]
    nbytes = sum(w.numel() for ws in layers for w in ws) * 4 + lm_head.numel() * 4

    def one_token() -> torch.Tensor:
        h = x
        for qkv, o, gate_up, down in layers:
            h = F.linear(F.linear(h, qkv)[:, :HIDDEN], o)
            h = F.linear(F.linear(h, gate_up)[:, :INTERMEDIATE], down)
        return F.linear(h, lm_head)

    with torch.inference_mode():
        for _ in range(3):
            one_token()
        start = time.perf_counter()
        for _ in range(args.tokens):
            one_token()
        per_token = (time.perf_counter() - start) / args.tokens
    print(f"torch threads {torch.get_num_threads()}, weights {nbytes / 1e6:.1f} MB per token")
    print(f"matmul-only batch-1 ceiling: {per_token * 1e3:.1f} ms/token -> {1 / per_token:.1f} tok/s "
          f"({nbytes / per_token / 1e9:.1f} GB/s effective)")


if __name__ == "__main__":
    main()
