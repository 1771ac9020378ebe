"""A/B of two source trees' fp32 product kernels (``decode_f32.cpp``) over a decode step's products.

Builds ``src/kvfence/engine/kernels/decode_f32.cpp`` of this tree and of ``--before-src`` (e.g. a
``git archive <commit> src`` unpacked somewhere) with the flags the engine uses, loads both in one
process, and times the products of one decode step of the SmolLM-135M shape (30 layers of fused
qkv, o, gate-up and down, then the 49152-row LM head: 538 MB of weights, far larger than the
caches, so they stream from memory as in the engine) at each row count, the two builds
interleaved, best of ``--steps``. Prints wall and CPU time (thread CPU time at one thread, process
CPU time otherwise, so on a busy machine one thread's figures are the ones to read) and whether
the two builds' outputs are bit-equal.

    .venv/bin/python bench/kernel_ab.py --before-src /tmp/before/src [--rows 1,3,4,8,16,24] [--threads 1]
"""

from __future__ import annotations

import argparse
import ctypes
import tempfile
import time
from pathlib import Path

import torch

from decode_weights import INTERMEDIATE, VOCAB, decode_step_weights
from kvfence.engine.kernels.build import find_compiler

_FLAGS = ["-O3", "-std=c++17", "-mavx2", "-mfma", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC"]


def build(src_root: Path, out: Path) -> ctypes.CDLL:
    import subprocess

    compiler = find_compiler()
    if compiler is None:
        raise SystemExit("no C++ compiler")
    source = src_root / "kvfence" / "engine" / "kernels" / "decode_f32.cpp"
    subprocess.run([compiler, *_FLAGS, "-o", str(out), str(source)], check=True)
    lib = ctypes.CDLL(str(out), mode=ctypes.RTLD_LOCAL)
    p, n = ctypes.c_void_p, ctypes.c_long
    # trees since the panel-major weights take one more argument (the panels, null here)
    lib.kvfence_linear_f32.argtypes = [p, n, n, p, n, n, p, p, n, n, n] + ([p] if _takes_panels(source) else [])
    lib.kvfence_linear_f32.restype = None
    return lib


def _takes_panels(source: Path) -> bool:
    return "const float* packed)" in source.read_text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-src", type=Path, required=True, help="the other tree's src/ directory")
    ap.add_argument("--rows", default="1,3,4,8,16,24")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12, help="timed decode steps per build and row count")
    ap.add_argument("--tiled-from", type=int, nargs=2, default=(5, 3), metavar=("BEFORE", "NOW"),
                    help="fewest rows for the tiled form in each build (each tree's TILED_MIN_ROWS)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="kernel-ab-"))
    here = Path(__file__).resolve().parents[1] / "src"
    libs = {"before": build(args.before_src, tmp / "before.so"), "now": build(here, tmp / "now.so")}
    tiled_from = dict(zip(libs, args.tiled_from, strict=True))
    gen = torch.Generator().manual_seed(0)
    weights = decode_step_weights(gen)
    max_rows = max(int(r) for r in args.rows.split(","))
    x = torch.randn(max_rows, INTERMEDIATE, generator=gen)
    y = torch.empty(max_rows * VOCAB)
    cpu_clock = time.thread_time if args.threads == 1 else time.process_time
    print(f"# decode-step products ({sum(w.numel() for w in weights) * 4 / 1e6:.0f} MB), {args.threads} thread(s), "
          f"best of {args.steps}, builds interleaved")
    for rows in (int(r) for r in args.rows.split(",")):
        best = {name: [float("inf"), float("inf")] for name in libs}
        outputs: dict[str, torch.Tensor] = {}
        for step in range(args.steps + 1):
            for name in (list(libs) if step % 2 else list(libs)[::-1]):
                fn = libs[name].kvfence_linear_f32
                extra = [None] * (len(fn.argtypes) - 11)
                wall, cpu = time.perf_counter(), cpu_clock()
                for w in weights:
                    fn(x.data_ptr(), rows, INTERMEDIATE, w.data_ptr(), w.shape[0], w.shape[1], None, y.data_ptr(),
                       1 << 15, args.threads, tiled_from[name], *extra)
                wall, cpu = time.perf_counter() - wall, cpu_clock() - cpu
                if step == 0:
                    outputs[name] = y[: rows * VOCAB].clone()  # the LM head's output
                else:
                    best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
        equal = torch.equal(outputs["before"], outputs["now"])
        print(f"rows {rows:3d}: " + "   ".join(f"{name} wall {b[0] * 1e3:7.1f} ms cpu {b[1] * 1e3:7.1f} ms"
                                            for name, b in best.items())
              + f"   now/before cpu {best['now'][1] / best['before'][1]:.2f}   outputs {'bit-equal' if equal else 'differ'}")


if __name__ == "__main__":
    main()
