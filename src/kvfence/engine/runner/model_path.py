"""Where a ``--model`` lives: a local directory, or a Hugging Face hub id already in the local hub cache.

kvfence never downloads. A hub id (``org/name``) that is not a directory is looked up in the cache
``huggingface_hub`` fills (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``), at
the snapshot ``refs/main`` names, so a model fetched once with ``huggingface-cli download`` is served
by the name vLLM users pass.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kvfence.errors import ModelLoadError

__all__ = ["hub_cache_dirs", "resolve_model_dir"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_cache_dirs() -> list[Path]:
    """The hub cache directories to look in, in huggingface_hub's order of precedence."""
    dirs = [os.environ.get("HF_HUB_CACHE"), os.environ.get("HUGGINGFACE_HUB_CACHE")]
    if home := os.environ.get("HF_HOME"):
        dirs.append(str(Path(home) / "hub"))
    dirs.append(str(Path.home() / ".cache" / "huggingface" / "hub"))
    return [Path(d).expanduser() for d in dirs if d]


def resolve_model_dir(model: str) -> Path:
    """The directory of ``model``; a hub id missing from every cache is a :class:`ModelLoadError` that says so."""
    path = Path(model).expanduser()
    if path.exists() or not _HUB_ID.match(model):
        return path  # a missing plain path is reported by ModelConfig.from_dir
    for cache in hub_cache_dirs():
        snapshot = _snapshot(cache / f"models--{model.replace('/', '--')}")
        if snapshot is not None:
            return snapshot
    raise ModelLoadError(
        f"model {model!r} is neither a local directory nor in the Hugging Face cache "
        f"({', '.join(str(d) for d in hub_cache_dirs())}); kvfence does not download models: fetch it first "
        f"(e.g. `huggingface-cli download {model}`) or pass its directory"
    )


def _snapshot(repo: Path) -> Path | None:
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        candidate = snapshots / ref.read_text(encoding="utf-8").strip()
        if (candidate / "config.json").is_file():
            return candidate
    complete = sorted((s for s in snapshots.iterdir() if (s / "config.json").is_file()),
                      key=lambda s: s.stat().st_mtime)
    return complete[-1] if complete else None
