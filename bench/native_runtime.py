"""The native runtime (``kvfence.engine.native``, numpy + the C++ kernels, no torch) against the torch
``ModelRunner``, runner against runner, on the SmolLM-135M-shaped random checkpoint of
``bench/throughput.py``. Each figure comes from its own child process, the two runtimes alternated:

  * peak RSS (``getrusage`` of the child) of a process that builds the runner at ``--dtype`` with a
    float16 KV pool of 8,192 tokens and runs 32 sequences of a 32-token prompt (one 1,024-row step)
    and 8 decode steps through ``execute()`` with a hand-made schedule, greedy;
  * batch-1 decode tok/s (64 steps after a 32-token prompt) and pp512 (one 512-token prefill step,
    best of 3) at ``--threads``.

    flock /tmp/kvfence-bench.lock python bench/native_runtime.py --repeats 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

POOL_TOKENS, PAGE = 8192, 16
RSS_SEQS, RSS_PROMPT, RSS_DECODES = 32, 32, 8


class _Ledger:
    num_pending_scrub = 0

    def flush_scrub(self, zero_fill: Any) -> None:
        zero_fill([])


def _runner(runtime: str, model_dir: Path, dtype: str, threads: int) -> Any:
    from kvfence.engine.config import ModelConfig

    cfg = ModelConfig.from_dir(model_dir)
    kw = {"max_len": POOL_TOKENS, "num_pages": POOL_TOKENS // PAGE, "page_size": PAGE, "ledger": _Ledger()}
    if runtime == "native":
        from kvfence.engine.native.runner import NativeRunner

        return NativeRunner(model_dir, cfg, dtype=dtype, kv_dtype="float16", num_threads=threads, **kw)
    import torch

    from kvfence.engine.runner.model_runner import ModelRunner

    torch.set_num_threads(threads)
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    return ModelRunner(model_dir, cfg, dtype=dt[dtype], device=torch.device("cpu"), kv_dtype=torch.float16, **kw)


def _argmax(logits: Any) -> list[int]:
    return [int(i) for i in (logits.argmax(-1).tolist())]


def _sequences(n: int, prompt: int, first_page: int = 0, pages_each: int | None = None) -> list[Any]:
    from kvfence.engine.core.sequence import Sequence

    pages_each = pages_each or POOL_TOKENS // PAGE // n
    out = []
    for i in range(n):
        s = Sequence(f"s{i}", [3 + (7 * i + 13 * j) % 250 for j in range(prompt)], b"bench")
        s.block_table = list(range(first_page + i * pages_each, first_page + (i + 1) * pages_each))
        out.append(s)
    return out


def _step(runner: Any, items: list[Any]) -> None:
    sampled, logits = runner.execute(items)
    for it, token in zip(sampled, _argmax(logits), strict=True):
        it.seq.token_ids.append(token)


def rss_child(runtime: str, model_dir: Path, dtype: str, threads: int) -> None:
    from kvfence.engine.core.scheduler import ScheduledSeq

    runner = _runner(runtime, model_dir, dtype, threads)
    seqs = _sequences(RSS_SEQS, RSS_PROMPT)
    _step(runner, [ScheduledSeq(s, 0, RSS_PROMPT, True) for s in seqs])
    for _ in range(RSS_DECODES):
        _step(runner, [ScheduledSeq(s, len(s.token_ids) - 1, 1, True) for s in seqs])
    print(json.dumps({"torch_loaded": "torch" in sys.modules}))


def speed_child(runtime: str, model_dir: Path, dtype: str, threads: int) -> None:
    from kvfence.engine.core.scheduler import ScheduledSeq

    runner = _runner(runtime, model_dir, dtype, threads)
    (s,) = _sequences(1, 32, pages_each=8)
    _step(runner, [ScheduledSeq(s, 0, 32, True)])
    for _ in range(8):  # warm-up
        _step(runner, [ScheduledSeq(s, len(s.token_ids) - 1, 1, True)])
    start = time.perf_counter()
    for _ in range(64):
        _step(runner, [ScheduledSeq(s, len(s.token_ids) - 1, 1, True)])
    decode = 64 / (time.perf_counter() - start)
    best = float("inf")
    for i in range(4):  # the first one warms up
        (p,) = _sequences(1, 512, first_page=8 + i * 33, pages_each=33)
        start = time.perf_counter()
        runner.execute([ScheduledSeq(p, 0, 512, True)])
        if i:
            best = min(best, time.perf_counter() - start)
    print(json.dumps({"decode_b1": decode, "pp512": 512 / best}))


_WRAP = ("import resource, subprocess, sys; d = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True); "
         "print(d.stdout.strip().splitlines()[-1]); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def _child(mode: str, runtime: str, model_dir: Path, dtype: str, threads: int) -> tuple[dict[str, Any], float]:
    cmd = [sys.executable, __file__, f"--{mode}-child", runtime, str(model_dir), dtype, str(threads)]
    done = subprocess.run([sys.executable, "-c", _WRAP, *cmd], capture_output=True, text=True, check=True)
    result, rss = done.stdout.strip().splitlines()[-2:]
    return json.loads(result), int(rss) / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model-root", type=Path, default=None)
    for mode in ("rss", "speed"):
        ap.add_argument(f"--{mode}-child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    for mode, fn in (("rss", rss_child), ("speed", speed_child)):
        child = getattr(args, f"{mode}_child")
        if child:
            fn(child[0], Path(child[1]), child[2], int(child[3]))
            return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from kvfence.engine.config import kvfence_home
    from throughput import build_model  # imports torch: the parent only

    model_dir = build_model(args.model_root or kvfence_home() / "bench" / "models")
    figures: dict[str, dict[str, list[float]]] = {"native": {}, "torch": {}}
    started = time.perf_counter()
    for r in range(args.repeats):
        for runtime in ("native", "torch") if r % 2 == 0 else ("torch", "native"):
            result, rss = _child("rss", runtime, model_dir, args.dtype, args.threads)
            figures[runtime].setdefault("peak_rss_mb", []).append(rss)
            figures[runtime].setdefault("torch_loaded", []).append(float(result["torch_loaded"]))
            speed, _ = _child("speed", runtime, model_dir, args.dtype, args.threads)
            for k, v in speed.items():
                figures[runtime].setdefault(k, []).append(v)
    floor = int(subprocess.run([sys.executable, "-c", _WRAP, sys.executable, "-c", "import torch; print(1)"],
                               capture_output=True, text=True, check=True).stdout.split()[-1]) / 1024
    print(f"{args.dtype} weights, float16 KV pool of {POOL_TOKENS} tokens, {args.threads} thread(s), "
          f"{args.repeats} alternated repeats (median [min-max]); {time.perf_counter() - started:.0f} s")
    for key, unit in (("peak_rss_mb", "MB"), ("decode_b1", "tok/s"), ("pp512", "tok/s")):
        cells = []
        for runtime in ("native", "torch"):
            v = figures[runtime][key]
            cells.append(f"{runtime} {statistics.median(v):7.1f} [{min(v):.1f}-{max(v):.1f}] {unit}")
        ratio = statistics.median(figures["native"][key]) / statistics.median(figures["torch"][key])
        print(f"  {key:12s} " + "   ".join(cells) + f"   native/torch {ratio:.2f}x")
    print(f"  torch imported in the native child: {any(figures['native']['torch_loaded'])}; "
          f"a process that only imports torch: {floor:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
