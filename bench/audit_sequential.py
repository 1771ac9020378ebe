"""The auditor against the simulated provider (tests/audit/simprovider.py), over seeded runs.

Per check, detection rate (defective targets) and false alarms (honest targets); the shortest leak
run found; and the time to verdict of the sequential cache-sharing audit at each level against the
fixed-sample one on the same targets, alternating the two.

    python bench/audit_sequential.py --seeds 3

Run from the repository root (it imports tests.audit.simprovider).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.audit.simprovider import ProviderConfig, run_provider

from kvfence.cli import cli

_KEYS = ["--key", "key-a", "--same-org-key", "key-a2", "--key-b", "key-b"]
_SHARING = ["--prompt-tokens", "600", "--no-progress", "--seed"]


def audit(check: str, url: str, *args: str) -> tuple[int, dict[str, Any], float]:
    with tempfile.TemporaryDirectory() as out:
        started = time.monotonic()
        result = CliRunner().invoke(cli, ["audit", check, "--endpoint", url, *_KEYS, "--out", out, *args])
        took = time.monotonic() - started
        path = Path(out) / f"{check}.json"
        data = json.loads(path.read_text()) if path.exists() else {}
    return result.exit_code, data, took


def rates(seeds: int, checks: set[str] | None = None) -> list[str]:
    lines = ["| check | target | runs | exit 1 (finding) | exit 0 | exit 2 |", "|---|---|---|---|---|---|"]
    cases = [
        ("admission", "honest, clamps at the context", ProviderConfig(context=2048), ["--seed"]),
        ("admission", "honest, refuses at the context", ProviderConfig(context=2048, boundary="reject"), ["--seed"]),
        ("admission", "truncate-and-answer", ProviderConfig(context=2048, mode="truncate"), ["--seed"]),
        ("leak", "honest", ProviderConfig(context=2048), ["--prompt-tokens", "600", "--seed"]),
        ("leak", "leaking 6 words", ProviderConfig(context=2048, mode="leaking", leak_words=6),
         ["--prompt-tokens", "600", "--seed"]),
        ("leak", "leaking 5 words", ProviderConfig(context=2048, mode="leaking", leak_words=5),
         ["--prompt-tokens", "600", "--seed"]),
        ("leak", "leaking 4 words", ProviderConfig(context=2048, mode="leaking", leak_words=4),
         ["--prompt-tokens", "600", "--seed"]),
        ("cache-sharing", "org scope (allowed)", ProviderConfig(cache_scope="org"), _SHARING),
        ("cache-sharing", "key scope (allowed)", ProviderConfig(cache_scope="key"), _SHARING),
        ("cache-sharing", "global scope", ProviderConfig(cache_scope="global"), _SHARING),
        ("cache-sharing", "no cache (power check fails)", ProviderConfig(cache_scope="none"), _SHARING),
        ("eviction", "scoped cache budget", ProviderConfig(context=512, kv_capacity=2048, cache_tokens=2048,
                                                           discovery="kvfence"), ["--trials", "8", "--seed"]),
        ("eviction", "one LRU for every scope", ProviderConfig(context=512, kv_capacity=2048, cache_tokens=2048,
                                                               discovery="kvfence", eviction="shared"),
         ["--trials", "8", "--seed"]),
    ]
    for check, name, config, args in cases:
        if checks and check not in checks:
            continue
        codes = []
        runs = []
        for seed in range(seeds):
            with run_provider(config) as url:
                code, data, _ = audit(check, url, *args, str(100 + seed))
            codes.append(code)
            runs.append(data.get("measurements", {}).get("leak_run_words"))
        extra = f" (runs of >= {sorted(set(runs))} words)" if check == "leak" else ""
        lines.append(f"| {check} | {name}{extra} | {seeds} | {codes.count(1)} | {codes.count(0)} | {codes.count(2)} |")
        print(lines[-1], flush=True)
    return lines


def sharing(seeds: int) -> list[str]:
    lines = ["| scope | mode | runs | verdicts (exit codes) | same-key s | same-org s | cross-org s | total s (median) |",
             "|---|---|---|---|---|---|---|---|"]
    for scope in ("org", "global"):
        results: dict[str, list[tuple[int, dict[str, float], float]]] = {"sequential": [], "fixed": []}
        for seed in range(seeds):
            for mode in ("sequential", "fixed") if seed % 2 == 0 else ("fixed", "sequential"):
                args = ["--prompt-tokens", "600", "--seed", str(200 + seed), "--no-progress"]
                if mode == "fixed":
                    args.append("--fixed-samples")
                with run_provider(ProviderConfig(cache_scope=scope)) as url:
                    code, data, took = audit("cache-sharing", url, *args)
                levels = data.get("measurements", {}).get("levels", {})
                per = {k: v.get("seconds", 0.0) for k, v in levels.items() if v.get("measured")}
                results[mode].append((code, per, took))
        for mode, runs in results.items():
            codes = [c for c, _, _ in runs]
            med = {lvl: statistics.median([p.get(lvl, 0.0) for _, p, _ in runs]) for lvl in
                   ("same-key", "same-org", "cross-org")}
            lines.append(f"| {scope} | {mode} | {len(runs)} | {sorted(codes)} | {med['same-key']:.1f} | "
                         f"{med['same-org']:.1f} | {med['cross-org']:.1f} | "
                         f"{statistics.median([t for _, _, t in runs]):.1f} (min {min(t for _, _, t in runs):.1f}) |")
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", choices=["rates", "sharing"])
    parser.add_argument("--checks", help="comma-separated checks of the rates table (default: all)")
    args = parser.parse_args()
    if args.only != "sharing":
        print("\n".join(rates(args.seeds, set(args.checks.split(",")) if args.checks else None)))
    if args.only != "rates":
        print("\n".join(sharing(args.seeds)))


if __name__ == "__main__":
    main()
