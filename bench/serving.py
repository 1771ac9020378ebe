"""Serving load and the prefix-cache timing side channel of `kvfence serve`, measured in one run.

    .venv/bin/python bench/serving.py [--clients 16] [--requests-per-client 4] [--prompt-tokens 256]
        [--max-tokens 32] [--samples 100] [--prefix-tokens 512] [--model DIR | --bench-model] [--json]

The server runs as a real `kvfence serve` subprocess on 127.0.0.1 with a keys file for two
organizations, on the built-in random-weight model unless ``--model`` is given. On a fast machine
(or a GPU) the built-in model's prefill is so cheap that a prefix-cache hit barely shows in time to
first token (TTFT); ``--bench-model`` then builds a larger random-weight Llama (same byte-level
tokenizer, hidden 256, 4 layers) and ``--prefix-tokens`` makes the prompts longer. On the CPU
engine the built-in model's prefill of 512 tokens already takes hundreds of milliseconds.

1. Load: ``--clients`` concurrent streaming clients, each sending ``--requests-per-client``
   completions of ``--prompt-tokens`` random text and ``--max-tokens`` generated tokens
   (``ignore_eos``). Reported: TTFT p50/p99, output tokens/s, requests/s.

2. Timing side channel (Gu et al., ICML 2025 method): for each of ``--samples`` random prefixes of
   ``--prefix-tokens`` tokens, organization A (key a1) sends the prefix once; then, in random
   order, (same-org) key a2 of organization A sends it, (cross-org) organization B sends it, and
   (fresh) B sends a prefix nobody sent. TTFT is measured client-side with ``max_tokens=1``. A
   two-sample Kolmogorov-Smirnov test compares same-org and cross-org TTFTs with fresh ones.
   This runs twice on the same model and prompts: ``--cache-scope org`` (kvfence's default) and
   ``--cache-scope global`` (one cache for everybody, the behaviour of engines without per-tenant
   scopes, e.g. vLLM before 0.9 / without cache_salt): the peer figure next to ours.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

BENCH_SHAPE = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 4}


def build_bench_model(target: Path) -> Path:
    """A random-weight Llama larger than the built-in one, reusing the built-in tokenizer files."""
    import torch
    from safetensors.torch import save_file

    from kvfence.engine.runner.default_model import ensure_default_model

    if (target / "model.safetensors").is_file():
        return target
    base = ensure_default_model()
    tmp = Path(tempfile.mkdtemp(prefix=".bench-model-", dir=target.parent))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(base / name, tmp / name)
    config = json.loads((base / "config.json").read_text())
    config.update(BENCH_SHAPE)
    config["head_dim"] = BENCH_SHAPE["hidden_size"] // BENCH_SHAPE["num_attention_heads"]
    config["kvfence_model_name"] = "bench-random-llama-256x4"
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    gen = torch.Generator().manual_seed(1234)
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * config["head_dim"]

    def normal(*shape: int, std: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std).contiguous()

    weights = {"model.embed_tokens.weight": normal(vocab, hidden, std=hidden**-0.5),
               "model.norm.weight": torch.ones(hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": torch.ones(hidden),
            p + "post_attention_layernorm.weight": torch.ones(hidden),
            p + "self_attn.q_proj.weight": normal(hidden, hidden, std=hidden**-0.5),
            p + "self_attn.k_proj.weight": normal(kv, hidden, std=hidden**-0.5),
            p + "self_attn.v_proj.weight": normal(kv, hidden, std=hidden**-0.5),
            p + "self_attn.o_proj.weight": normal(hidden, hidden, std=hidden**-0.5),
            p + "mlp.gate_proj.weight": normal(inter, hidden, std=hidden**-0.5),
            p + "mlp.up_proj.weight": normal(inter, hidden, std=hidden**-0.5),
            p + "mlp.down_proj.weight": normal(hidden, inter, std=inter**-0.5),
        }
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    os.replace(tmp, target)
    return target


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`kvfence serve` in a subprocess with keys for organizations A (a1, a2) and B (b1)."""

    def __init__(self, model: Path | None, cache_scope: str, workdir: Path, extra: list[str]) -> None:
        from kvfence.server.auth.keys import add_key

        self.keys_path = workdir / f"keys-{cache_scope}.toml"
        self.keys = {
            "a1": add_key(self.keys_path, organization="org-a", workspace="w1", name="a1"),
            "a2": add_key(self.keys_path, organization="org-a", workspace="w2", name="a2"),
            "b1": add_key(self.keys_path, organization="org-b", workspace="w1", name="b1"),
        }
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(REPO / ".venv/bin/kvfence"), "serve", "--keys", str(self.keys_path), "--port", str(self.port),
               "--cache-scope", cache_scope, "--secret-file", str(workdir / "secret"), "--log-level", "warning",
               *extra]
        if model is not None:
            cmd += ["--model", str(model)]
        self.log = (workdir / f"server-{cache_scope}.log").open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready")
            time.sleep(0.2)
        self.capacity = httpx.get(self.url + "/v1/capacity").json()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_lowercase + "     ") for _ in range(n))


async def stream_once(client: httpx.AsyncClient, url: str, key: str, body: dict[str, Any]) -> tuple[float, int, int]:
    """(TTFT seconds, completion tokens, cached prompt tokens) of one streamed completion."""
    start = time.perf_counter()
    ttft: float | None = None
    usage: dict[str, Any] = {}
    async with client.stream("POST", url + "/v1/completions", json=body,
                             headers={"Authorization": f"Bearer {key}"}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("choices") and ttft is None:
                ttft = time.perf_counter() - start
            if event.get("usage"):
                usage = event["usage"]
    if ttft is None:
        raise RuntimeError("no token arrived")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return ttft, int(usage.get("completion_tokens", 0)), int(cached)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def load_test(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(7)
    ttfts: list[float] = []
    tokens = 0
    keys = list(server.keys.values())

    async def client_loop(i: int, client: httpx.AsyncClient) -> None:
        nonlocal tokens
        for _ in range(args.requests_per_client):
            body = {"prompt": random_text(rng, args.prompt_tokens), "max_tokens": args.max_tokens,
                    "temperature": 0, "ignore_eos": True, "stream": True, "logprobs": 0,
                    "stream_options": {"include_usage": True}}
            ttft, n, _ = await stream_once(client, server.url, keys[i % len(keys)], body)
            ttfts.append(ttft)
            tokens += n

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=args.clients + 4)) as client:
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(i, client) for i in range(args.clients)))
        wall = time.perf_counter() - start
    n_req = args.clients * args.requests_per_client
    return {"clients": args.clients, "requests": n_req, "wall_s": wall,
            "ttft_p50_ms": 1000 * pct(ttfts, 0.5), "ttft_p99_ms": 1000 * pct(ttfts, 0.99),
            "output_tokens_per_s": tokens / wall, "requests_per_s": n_req / wall}


async def timing_test(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    from scipy.stats import ks_2samp

    rng = random.Random(11)
    results: dict[str, list[float]] = {"same_org": [], "cross_org": [], "fresh": []}
    cached: dict[str, list[int]] = {k: [] for k in results}
    k = server.keys
    body = {"max_tokens": 1, "temperature": 0, "stream": True, "logprobs": 0,
            "stream_options": {"include_usage": True}}
    async with httpx.AsyncClient(timeout=600) as client:
        # Warm-up: first requests pay one-off costs (allocator, kernels).
        for _ in range(3):
            await stream_once(client, server.url, k["b1"], dict(body, prompt=random_text(rng, args.prefix_tokens)))
        for i in range(args.samples):
            prefix = random_text(rng, args.prefix_tokens)
            await stream_once(client, server.url, k["a1"], dict(body, prompt=prefix + f" q0 {i}"))
            probes = [("same_org", k["a2"], prefix + f" q1 {i}"),
                      ("cross_org", k["b1"], prefix + f" q2 {i}"),
                      ("fresh", k["b1"], random_text(rng, args.prefix_tokens) + f" q3 {i}")]
            rng.shuffle(probes)
            for name, key, prompt in probes:
                ttft, _, hit = await stream_once(client, server.url, key, dict(body, prompt=prompt))
                results[name].append(ttft)
                cached[name].append(hit)
    out: dict[str, Any] = {}
    for name, values in results.items():
        out[name] = {"ttft_p50_ms": 1000 * statistics.median(values), "ttft_p99_ms": 1000 * pct(values, 0.99),
                     "hit_rate": sum(1 for c in cached[name] if c > 0) / len(cached[name])}
    out["ks_same_vs_fresh_p"] = float(ks_2samp(results["same_org"], results["fresh"]).pvalue)
    out["ks_cross_vs_fresh_p"] = float(ks_2samp(results["cross_org"], results["fresh"]).pvalue)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--samples", type=int, default=100, help="TTFT samples per condition")
    parser.add_argument("--prefix-tokens", type=int, default=512)
    parser.add_argument("--model", type=Path, default=None, help="model directory (default: the built-in model)")
    parser.add_argument("--bench-model", action="store_true",
                        help="build and use a larger random-weight model, so prefill time is measurable on fast hardware")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()

    from kvfence.engine.config import kvfence_home

    model = args.model
    if model is None and args.bench_model:
        target = kvfence_home() / "models" / "bench-random-llama-256x4-v1"
        target.parent.mkdir(parents=True, exist_ok=True)
        model = build_bench_model(target)
    extra = ["--kv-cache-tokens", str(max(65536, 8 * args.prefix_tokens)), "--max-model-len",
             str(max(2048, args.prefix_tokens + 64, args.prompt_tokens + args.max_tokens + 16)), "--device", "cpu"]
    report: dict[str, Any] = {"model": str(model) if model is not None else "built-in random-weight model",
                              "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="kvfence-bench-") as tmp:
        workdir = Path(tmp)
        for scope in ("org", "global"):
            server = Server(model, scope, workdir, extra)
            try:
                if scope == "org" and not args.skip_load:
                    report["load"] = asyncio.run(load_test(server, args))
                if not args.skip_timing:
                    report[f"timing_{scope}"] = asyncio.run(timing_test(server, args))
            finally:
                server.close()
            if args.skip_timing:
                break
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"model: {report['model']}  (CPUs: {report['cpu_count']})")
    if "load" in report:
        ld = report["load"]
        print(f"\nload: {ld['clients']} concurrent streaming clients, {ld['requests']} requests, "
              f"{args.prompt_tokens} prompt + {args.max_tokens} output tokens each")
        print(f"  TTFT p50 {ld['ttft_p50_ms']:.0f} ms   p99 {ld['ttft_p99_ms']:.0f} ms   "
              f"{ld['output_tokens_per_s']:.1f} output tokens/s   {ld['requests_per_s']:.2f} requests/s")
    for scope in ("org", "global"):
        t = report.get(f"timing_{scope}")
        if t is None:
            continue
        label = "kvfence --cache-scope org" if scope == "org" else "shared cache (--cache-scope global, peer behaviour)"
        print(f"\ntiming side channel, {label}: {args.samples} samples/condition, prefix {args.prefix_tokens} tokens")
        for name in ("same_org", "cross_org", "fresh"):
            row = t[name]
            print(f"  {name:9s}  TTFT p50 {row['ttft_p50_ms']:7.1f} ms  p99 {row['ttft_p99_ms']:7.1f} ms  "
                  f"cache hits {100 * row['hit_rate']:5.1f}%")
        print(f"  KS p-value same-org vs fresh:  {t['ks_same_vs_fresh_p']:.3g}")
        print(f"  KS p-value cross-org vs fresh: {t['ks_cross_vs_fresh_p']:.3g}")


if __name__ == "__main__":
    main()
