"""The decode kernel's product forms side by side over a decode step's products, in one process.

Times, at each row count, the products of one decode step of the SmolLM-135M shape (30 layers of
fused qkv, o, gate-up and down, then the 49152-row LM head: 538 MB of weights, far larger than the
caches, so they stream from memory as in the engine) in each form of ``decode_f32.cpp``: the
dot-product form, the broadcast tile over the ``[out, in]`` weights (``broadcast_gemm.h``) and the
tile over panel-major copies (``packed_gemm.h``, for the row counts where the kernel takes them),
interleaved, the order alternating by round, best of ``--steps``. Prints CPU time (thread CPU time
at one thread, the one to read on a busy machine) and wall time, and whether the two tiled forms
gave the same bits.

    .venv/bin/python bench/product_forms.py [--rows 1,2,3,4,8,16,24] [--threads 1] [--steps 6]
"""

from __future__ import annotations

import argparse
import time

import torch

from decode_weights import INTERMEDIATE, VOCAB, decode_step_weights
from kvfence.engine.kernels.library import cpu_kernels
from kvfence.engine.kernels.ops import MIN_PARALLEL_WEIGHTS
from kvfence.engine.kernels.packed_weights import PACKED_MAX_ROWS, PACKED_MIN_ROWS, pack_weight


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1,2,3,4,8,16,24")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6, help="timed decode steps per form and row count")
    args = ap.parse_args()
    lib = cpu_kernels()
    if lib is None:
        raise SystemExit("the CPU kernels are not in use here")
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    weights = decode_step_weights(gen)
    panels = [pack_weight(w) for w in weights]
    rows_list = [int(r) for r in args.rows.split(",")]
    x = torch.randn(max(rows_list), INTERMEDIATE, generator=gen)
    y = torch.empty(max(rows_list) * VOCAB)
    cpu_clock = time.thread_time if args.threads == 1 else time.process_time
    print(f"# decode-step products ({sum(w.numel() for w in weights) * 4 / 1e6:.0f} MB), {args.threads} thread(s), "
          f"best of {args.steps}, forms interleaved; panels serve {PACKED_MIN_ROWS}-{PACKED_MAX_ROWS} rows")
    for rows in rows_list:
        forms = {"dot": (rows + 1, False), "broadcast tile": (1, False)}
        if PACKED_MIN_ROWS <= rows <= PACKED_MAX_ROWS:
            forms["panels"] = (1, True)
        best = {name: [float("inf"), float("inf")] for name in forms}
        outputs: dict[str, torch.Tensor] = {}
        for step in range(args.steps + 1):
            for name in list(forms) if step % 2 else list(forms)[::-1]:
                tiled_from, packed = forms[name]
                wall, cpu = time.perf_counter(), cpu_clock()
                for w, p in zip(weights, panels, strict=True):
                    lib.kvfence_linear_f32(x.data_ptr(), rows, INTERMEDIATE, w.data_ptr(), w.shape[0], w.shape[1],
                                           None, y.data_ptr(), MIN_PARALLEL_WEIGHTS, args.threads, tiled_from,
                                           p.data_ptr() if packed else None)
                wall, cpu = time.perf_counter() - wall, cpu_clock() - cpu
                if step == 0:
                    outputs[name] = y[: rows * VOCAB].clone()  # the LM head's output
                else:
                    best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
        same = "panels" not in outputs or torch.equal(outputs["panels"], outputs["broadcast tile"])
        gflop = 2 * rows * sum(w.numel() for w in weights) / 1e9
        print(f"rows {rows:3d}: " + "   ".join(
            f"{name} cpu {b[1] * 1e3:6.1f} ms ({gflop / b[1]:5.1f} GFLOP/s) wall {b[0] * 1e3:6.1f}"
            for name, b in best.items()) + ("   tiled forms bit-equal" if same else "   TILED FORMS DIFFER"))


if __name__ == "__main__":
    main()
