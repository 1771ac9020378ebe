"""A decode step's fp32 products at several batch sizes: kvfence's tiled kernel (AVX2 and AVX-512
tiles) against torch's ``F.linear`` (MKL), one process, interleaved, best of N, CPU ms.

The products of a SmolLM-135M-shaped step (30 layers of fused qkv, o, gate-up and down, then the
49,152-row LM head; 538 MB of float32 weights on huge pages, as the engine holds them), streamed
from memory, at each batch size. This is what the start-up calibration decides between
(``kvfence.engine.kernels.calibrate_linear``, per batch size), and what a B-row decode step costs
outside attention, norms and the engine's Python.

    python bench/tiled_products.py [--rows 8,16,32,64,96] [--threads 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import torch

from kvfence.engine.kernels import kernel_status, linear, use_gemv_kernel
from kvfence.engine.kernels.huge_pages import huge_page_empty
from kvfence.engine.kernels.library import set_tiled_isa, tiled_isa

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)] * 30 + [(49152, 576)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="8,16,32,64,96")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    status = kernel_status()
    if not status.enabled:
        print(f"kvfence's CPU kernels are not in use here ({status.reason}); nothing to compare")
        return 0
    best_isa = set_tiled_isa("avx512")
    forms = ["avx2", "avx512", "torch"] if best_isa == "avx512" else ["avx2", "torch"]
    gen = torch.Generator().manual_seed(0)
    flat = huge_page_empty((sum(o * i for o, i in SHAPES),), torch.float32, torch.device("cpu"))
    flat.normal_(generator=gen)
    weights, offset = [], 0
    for o, i in SHAPES:
        weights.append(flat[offset : offset + o * i].view(o, i))
        offset += o * i
    print(f"{flat.numel() * 4 / 1e6:.0f} MB of weights, {args.threads} thread(s); CPU ms, best of {args.repeats}")
    for rows in (int(r) for r in args.rows.split(",")):
        inputs = {i: torch.randn(rows, i, generator=gen) for _, i in SHAPES}
        best = dict.fromkeys(forms, float("inf"))
        with torch.inference_mode():
            for _ in range(args.repeats):
                for form in forms:
                    use_gemv_kernel(form != "torch")
                    if form != "torch":
                        set_tiled_isa(form)
                    start = time.process_time()
                    for w in weights:
                        linear(inputs[w.shape[1]], w)
                    best[form] = min(best[form], time.process_time() - start)
        flops = 2 * rows * flat.numel()
        cells = "  ".join(f"{f} {best[f] * 1e3:6.1f} ({flops / best[f] / 1e9:5.1f} GFLOP/s)" for f in forms)
        print(f"rows {rows:3d}: {cells}")
    use_gemv_kernel(True)
    set_tiled_isa(best_isa)
    print(f"(tiles now {tiled_isa()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
