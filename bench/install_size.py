"""Install time and size of kvfence's extras, each in a fresh venv (the numbers in docs/install.md).

For each round and extra, alternating: ``python -m venv``, upgrade pip, then time
``pip install --no-cache-dir 'SRC[extra]'`` from a copy of this checkout (the same pip sources ``make``
uses: this machine's pip configuration), and measure the venv on disk. Prints one line per install and
a min / median summary per extra.

    python bench/install_size.py --extras gateway,all --rounds 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "spacy", "presidio_analyzer", "scipy", "matplotlib", "llguidance")


def _size_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with_path = Path(root, name)
            if not with_path.is_symlink():
                total += with_path.stat().st_size
    return total / 2**20


def _one(source: Path, extra: str, work: Path) -> dict[str, object]:
    venv = work / f"venv-{extra}"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin/python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True, capture_output=True)
    empty = _size_mb(venv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-cache-dir", f"{source}[{extra}]"],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:  # pip's own warnings are noise otherwise
        raise SystemExit(f"pip install [{extra}] failed:\n{done.stdout}{done.stderr}")
    seconds = time.perf_counter() - start
    listed = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                            check=True, env=env).stdout.split()
    present = [m for m in HEAVY
               if subprocess.run([python, "-c", f"import {m}"], capture_output=True, env=env).returncode == 0]
    return {"extra": extra, "seconds": seconds, "venv_mb": _size_mb(venv), "empty_venv_mb": empty,
            "packages": len(listed), "heavy": present, "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--extras", default="gateway,all")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    extras = [e.strip() for e in args.extras.split(",") if e.strip()]
    with tempfile.TemporaryDirectory(prefix="kvfence-install-") as tmp:
        work = Path(tmp)
        source = work / "source"
        source.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(REPO / name, source / name)
        shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        results: dict[str, list[dict[str, object]]] = {e: [] for e in extras}
        for round_ in range(1, args.rounds + 1):
            for extra in extras:
                row = _one(source, extra, work)
                results[extra].append(row)
                print(f"round {round_} [{extra}]: {row['seconds']:.1f} s, venv {row['venv_mb']:.0f} MB "
                      f"(empty venv {row['empty_venv_mb']:.0f} MB), {row['packages']} packages, load {row['load']:.2f}, "
                      f"heavy modules importable: {', '.join(row['heavy']) or 'none'}", flush=True)  # type: ignore[arg-type]
        for extra, rows in results.items():
            seconds = [float(r["seconds"]) for r in rows]  # type: ignore[arg-type]
            sizes = [float(r["venv_mb"]) for r in rows]  # type: ignore[arg-type]
            print(f"[{extra}]: install min {min(seconds):.1f} s / median {statistics.median(seconds):.1f} s; "
                  f"venv {statistics.median(sizes):.0f} MB")


if __name__ == "__main__":
    main()
