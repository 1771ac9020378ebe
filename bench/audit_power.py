"""How many TTFT samples does `kvfence audit cache-sharing` need for a correct verdict?

Starts `kvfence serve` twice, with ``--cache-scope org`` and ``--cache-scope global``, and runs the
cache-sharing audit with different seeds against each. A run is correct when

* org scope: the same-key and same-org levels share a cache and the cross-org level does not;
* global scope: the same-key and cross-org levels share a cache (same-org is not measured).

Each run takes ``--samples`` hit and miss samples per level. Smaller sample sizes are scored on the
first k hit and first k miss samples of each run: trials are randomly interleaved, so these are
the samples a k-sample run would have taken (up to the exact interleaving). The peer figure is Gu
et al.'s 250 samples per procedure.

    python bench/audit_power.py --runs 20 --samples 250 --subsample 10,25,50,100
    python bench/audit_power.py --servers-per-scope 7 --time-budget-s 420   # a 16-core machine

``--build-model HIDDEN,LAYERS`` builds a larger random-weight Llama (transformers' LlamaConfig +
save_pretrained, the built-in byte-level tokenizer) so that prefill time dominates TTFT noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from kvfence.audit.cache_sharing import CacheSharingConfig, run_cache_sharing
from kvfence.audit.client import EndpointClient
from kvfence.audit.sharing_policy import AllowedSharing, Level, LevelOutcome, decide
from kvfence.audit.stats import compare_timings
from kvfence.audit.target import AuditTarget
from kvfence.server.auth.keys import add_key

PAPER_SAMPLES = 250


def build_model(out: Path, hidden: int, layers: int, dtype: str) -> Path:
    """A random-weight Llama of the given size with the built-in model's byte-level tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from kvfence.engine.runner.default_model import ensure_default_model

    base = ensure_default_model()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (base / name).exists():
            shutil.copy(base / name, out / name)
    fields = json.loads((base / "config.json").read_text())
    heads = max(1, hidden // 128)
    fields.update(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=max(1, heads // 4), head_dim=hidden // heads,
                  intermediate_size=int(hidden * 8 / 3 // 64 * 64), torch_dtype=dtype,
                  kvfence_model_name=f"bench-random-llama-{hidden}x{layers}")
    kvfence_fields = {k: v for k, v in fields.items() if k.startswith("kvfence_")}
    config = LlamaConfig(**{k: v for k, v in fields.items() if not k.startswith("kvfence_")})
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    saved = json.loads((out / "config.json").read_text())
    saved.update(kvfence_fields)  # keep the "random weights" label the engine reads
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    del model
    return out


class Server:
    """`kvfence serve` in a subprocess, with three keys in two organisations."""

    def __init__(self, tmp: Path, scope: str, port: int, serve_args: list[str], threads: int) -> None:
        keys = tmp / f"keys-{scope}-{port}.toml"
        self.key_a = add_key(keys, organization="acme", workspace="research", name="a")
        self.key_a2 = add_key(keys, organization="acme", workspace="sales", name="a2")
        self.key_b = add_key(keys, organization="globex", workspace="default", name="b")
        self.url = f"http://127.0.0.1:{port}"
        self.log = tmp / f"serve-{scope}-{port}.log"
        # Few torch threads per server: spinning intra-op threads on a busy machine drown TTFT in noise.
        env = {**os.environ, "KVFENCE_HOME": str(tmp / "home"), "PYTHONUNBUFFERED": "1",
               "OMP_NUM_THREADS": str(threads)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from kvfence.cli import main; main()", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--keys", str(keys), "--cache-scope", scope, "--log-level", "warning",
             "--secret-file", str(tmp / f"secret-{scope}-{port}"), *serve_args],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env,
        )

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvfence serve exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"kvfence serve not healthy after {timeout}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def correct(scope: str, shares: dict[str, bool]) -> bool:
    if scope == "org":
        return shares["same-key"] and shares["same-org"] and not shares["cross-org"]
    return shares["same-key"] and shares["cross-org"]


def score(scope: str, levels: dict[str, Any], k: int, alpha: float) -> dict[str, Any]:
    """Verdict of one run re-scored on its first k hit and k miss samples."""
    shares: dict[str, bool] = {}
    p_values: dict[str, float] = {}
    outcomes = []
    for name, data in levels.items():
        if not data.get("measured"):
            continue
        comparison = compare_timings(data["hit_ttft_ms"][:k], data["miss_ttft_ms"][:k])
        shares[name] = comparison.detects_cache(alpha)
        p_values[name] = comparison.p_value
        outcomes.append(LevelOutcome(Level(name), shares[name], comparison.p_value))
    verdict, _ = decide(outcomes, AllowedSharing.ORG)
    return {"correct": correct(scope, shares) if "same-key" in shares else False, "shares": shares,
            "p_values": p_values, "verdict": verdict.value}


async def one_run(server: Server, scope: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    target = AuditTarget.build(endpoint=server.url, key=server.key_a, key_b=server.key_b,
                               same_org_key=server.key_a2 if scope == "org" else None, timeout_s=600)
    config = CacheSharingConfig(samples=args.samples, prompt_tokens=args.prompt_tokens, alpha=args.alpha,
                                seed=seed, allow_sharing=AllowedSharing.ORG)
    started = time.perf_counter()
    async with EndpointClient(target) as client:
        result = await run_cache_sharing(client, config)
    levels = result.measurements["levels"]
    sizes = sorted({*args.subsample, args.samples})
    return {"scope": scope, "seed": seed, "duration_s": round(time.perf_counter() - started, 2),
            "verdict": result.verdict.value,
            "by_samples": {str(k): score(scope, levels, k, args.alpha) for k in sizes if k <= args.samples},
            "median_ms": {n: {"hit": d["stats"]["median_hit_ms"], "miss": d["stats"]["median_miss_ms"]}
                          for n, d in levels.items() if d.get("measured")}}


async def campaign(servers: dict[str, list[Server]], args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Seeded runs, one at a time per server, all servers at once, until done or out of time."""
    runs: list[dict[str, Any]] = []
    deadline = time.monotonic() + args.time_budget_s
    queues: dict[str, asyncio.Queue[int]] = {scope: asyncio.Queue() for scope in servers}
    for seed in range(args.first_seed, args.first_seed + args.runs):
        for scope in servers:
            queues[scope].put_nowait(seed)

    async def worker(scope: str, server: Server) -> None:
        while not queues[scope].empty() and time.monotonic() < deadline:
            seed = queues[scope].get_nowait()
            try:
                run = await one_run(server, scope, seed, args)
            except Exception as exc:  # keep the campaign going; the failure is part of the record
                run = {"scope": scope, "seed": seed, "error": f"{type(exc).__name__}: {exc}"}
            runs.append(run)
            out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}, indent=2))
            print(json.dumps({k: run.get(k) for k in ("scope", "seed", "verdict", "duration_s", "error")}),
                  flush=True)

    await asyncio.gather(*(worker(scope, server) for scope, group in servers.items() for server in group))
    return runs


def summarise(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    sizes = sorted({*args.subsample, args.samples})
    lines = [f"{'samples/procedure':>18} | " + " | ".join(f"{s:>14}" for s in ("org correct", "global correct"))]
    for k in sizes:
        cells = []
        for scope in ("org", "global"):
            scored = [r["by_samples"][str(k)]["correct"] for r in runs
                      if r.get("scope") == scope and str(k) in r.get("by_samples", {})]
            cells.append(f"{sum(scored):>6} / {len(scored):<5}" if scored else f"{'-':>14}")
        marker = "  (Gu et al.'s sample size)" if k == PAPER_SAMPLES else ""
        lines.append(f"{k:>18} | " + " | ".join(f"{c:>14}" for c in cells) + marker)
    errors = [r for r in runs if "error" in r]
    if errors:
        lines.append(f"{len(errors)} run(s) failed: {errors[0]['error']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="seeded runs per scope")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first run (to extend a campaign)")
    parser.add_argument("--summarise", type=Path, nargs="+", help="only print the table of earlier --out files")
    parser.add_argument("--samples", type=int, default=PAPER_SAMPLES, help="samples per procedure and level")
    parser.add_argument("--subsample", type=lambda s: [int(x) for x in s.split(",") if x], default=[10, 25, 50, 100])
    parser.add_argument("--prompt-tokens", type=int, default=400)
    parser.add_argument("--alpha", type=float, default=1e-4)
    parser.add_argument("--scopes", default="org,global")
    parser.add_argument("--servers-per-scope", type=int, default=1, help="servers per scope, each running runs")
    parser.add_argument("--server-threads", type=int, default=1, help="torch threads of each server")
    parser.add_argument("--time-budget-s", type=float, default=1e9, help="start no run after this many seconds")
    parser.add_argument("--build-model", help="HIDDEN,LAYERS of a larger random Llama to serve")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra `kvfence serve` argument")
    parser.add_argument("--out", type=Path, default=Path("audit_power.json"))
    args = parser.parse_args()
    if args.summarise:
        runs = [run for path in args.summarise for run in json.loads(path.read_text())["runs"]]
        print(f"{len(runs)} runs from {', '.join(str(p) for p in args.summarise)}")
        print(summarise(runs, args))
        return
    scopes = [s for s in args.scopes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="kvfence-audit-power-") as tmp_dir:
        tmp = Path(tmp_dir)
        os.environ["KVFENCE_HOME"] = str(tmp / "home")
        serve_args = ["--device", args.device, "--dtype", args.dtype, "--max-model-len", "2048",
                      "--kv-cache-tokens", "65536", *args.serve_arg]
        if args.build_model:
            hidden, layers = (int(x) for x in args.build_model.split(","))
            t0 = time.perf_counter()
            model_dir = build_model(tmp / "model", hidden, layers, args.dtype)
            print(f"built random Llama {hidden}x{layers} in {time.perf_counter() - t0:.1f}s", flush=True)
            serve_args += ["--model", str(model_dir)]
        servers = {scope: [Server(tmp, scope, free_port(), serve_args, args.server_threads)
                           for _ in range(args.servers_per_scope)] for scope in scopes}
        everyone = [server for group in servers.values() for server in group]
        try:
            for server in everyone:
                server.wait(600)
            t0 = time.perf_counter()
            runs = asyncio.run(campaign(servers, args, args.out))
            wall = time.perf_counter() - t0
        finally:
            for server in everyone:
                server.stop()
    print(f"\ncache-sharing audit against kvfence serve: {len(runs)} runs in {wall:.0f}s, "
          f"{args.samples} samples/procedure, prompt {args.prompt_tokens} tokens, alpha {args.alpha}, "
          f"device {args.device}, model {args.build_model or 'built-in'}, "
          f"{args.servers_per_scope} server(s) per scope with {args.server_threads} torch thread(s)")
    print(summarise(runs, args))


if __name__ == "__main__":
    main()
