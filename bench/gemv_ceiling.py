"""The matmul-only ceiling of batch-1 fp32 decode for a SmolLM-135M shape: torch vs kvfence's kernel.

Batch-1 decode reads every weight once per token; this runs only those products (30 layers of
fused qkv, o, gate-up and down projections, then the 49152-row LM head), with no attention, norms
or Python engine around them, three ways in one run, interleaved, best of N:

* memory read bandwidth (a ``sum()`` over 1 GiB), the roofline every figure is set against;
* torch's ``F.linear`` chain: what any torch-only engine can reach here at best;
* kvfence's CPU kernel chain (``kvfence.engine.kernels.linear``): what the engine's decode can reach;
* kvfence's fused decoder layers (``DecoderLayerKernel``: the same products plus the norms, RoPE,
  silu and residual adds, two calls per layer, attention left out) and the LM head: what a decode
  step costs outside attention, sampling and the engine's Python.

    .venv/bin/python bench/gemv_ceiling.py [--threads N] [--batch B] [--repeats N] [--alternatives]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from kvfence.engine.kernels import MAX_KERNEL_ROWS, DecoderLayerKernel, kernel_status, linear

LAYERS, HIDDEN, INTERMEDIATE, VOCAB, KV = 30, 576, 1536, 49152, 192
HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--batch", type=int, default=1, help=f"rows per product (the kernel takes up to {MAX_KERNEL_ROWS})")
    parser.add_argument("--tokens", type=int, default=10, help="decode steps per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per variant (best kept)")
    parser.add_argument("--alternatives", action="store_true",
                        help="also torch.mv, x @ W.t() and torch.mm with the weights stored transposed")
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
    x = torch.randn(args.batch, HIDDEN, generator=gen)  # x: [B, D]
    nbytes = sum(w.numel() for ws in layers for w in ws) * 4 + lm_head.numel() * 4
    buf = torch.ones(1 << 28, dtype=torch.float32)  # 1 GiB, far larger than the caches

    def chain(mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(args.tokens):
                h = x
                for qkv, o, gate_up, down in layers:
                    h = mm(mm(h, qkv)[:, :HIDDEN].contiguous(), o)
                    h = mm(mm(h, gate_up)[:, :INTERMEDIATE].contiguous(), down)
                mm(h, lm_head)
        return run

    variants: dict[str, Callable[[], None]] = {"torch F.linear": chain(F.linear)}
    if args.alternatives:
        transposed = {id(w): w.t().contiguous() for ws in layers for w in ws} | {id(lm_head): lm_head.t().contiguous()}
        variants["torch.mv"] = chain(lambda h, w: torch.mv(w, h[0])[None] if h.shape[0] == 1 else F.linear(h, w))
        variants["x @ W.t()"] = chain(lambda h, w: h @ w.t())
        variants["mm(x, W_T)"] = chain(lambda h, w: torch.mm(h, transposed[id(w)]))
    status = kernel_status()
    if status.enabled:
        variants["kvfence kernel"] = chain(linear)
        fused = fused_layers(layers, lm_head, args.batch, args.tokens, gen)
        if fused is not None:
            variants["fused layers"] = fused
    best = {name: float("inf") for name in (*variants, "sum")}
    with torch.inference_mode():
        for run in variants.values():
            run()  # warm-up
        for _ in range(args.repeats):
            start = time.perf_counter()
            buf.sum()
            best["sum"] = min(best["sum"], time.perf_counter() - start)
            for name, run in variants.items():
                start = time.perf_counter()
                run()
                best[name] = min(best[name], (time.perf_counter() - start) / args.tokens)
    bandwidth = buf.numel() * 4 / best["sum"]
    roofline = bandwidth / nbytes
    print(f"torch threads {torch.get_num_threads()}, batch {args.batch}, weights {nbytes / 1e6:.1f} MB per step; "
          f"CPU kernel: {status.reason}")
    print(f"memory read bandwidth {bandwidth / 1e9:.1f} GB/s -> roofline {roofline:.1f} steps/s")
    for name in variants:
        per_step = best[name]
        label = "no-attention step" if name == "fused layers" else "matmul-only ceiling"
        print(f"{name:15s} {label:19s}: {per_step * 1e3:6.1f} ms/step -> {1 / per_step:5.1f} steps/s "
              f"({nbytes / per_step / 1e9:4.1f} GB/s, {1 / per_step / roofline:4.0%} of roofline)")


def fused_layers(
    layers: Sequence[tuple[torch.Tensor, ...]], lm_head: torch.Tensor, batch: int, tokens: int, gen: torch.Generator
) -> Callable[[], None] | None:
    """Decode steps through every layer's fused halves (attention replaced by the query heads, no
    pool; two small torch ops per layer rescale the random activations), then the LM head;
    ``None`` when the fused kernel does not take this batch here."""
    norm = torch.ones(HIDDEN)
    kernels = [
        DecoderLayerKernel.build(
            input_norm=norm, post_norm=norm, eps=1e-5, qkv=(qkv, None), o=(o, None), gate_up=(gate_up, None),
            down=(down, None), num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
        )
        for qkv, o, gate_up, down in layers
    ]
    angles = torch.rand(batch, 1, HEAD_DIM // 2, generator=gen)
    cos, sin = angles.cos(), angles.sin()
    x = torch.randn(batch, HIDDEN, generator=gen)
    if any(k is None for k in kernels) or not kernels[0].takes(x, cos, sin):  # type: ignore[union-attr]
        return None

    def run() -> None:
        for _ in range(tokens):
            h = x
            for kernel in kernels:
                assert kernel is not None
                qkv = kernel.pre(h, cos, sin)
                h = kernel.post(qkv[:, :HEADS].reshape(batch, HEADS * HEAD_DIM), h)
                h = h / h.abs().amax()  # random weights: keep the values finite across 30 layers
            linear(h, lm_head)
    return run


if __name__ == "__main__":
    main()
