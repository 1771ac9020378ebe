"""The sampling defaults a checkpoint ships in ``generation_config.json``, as vLLM applies them.

Instruct models say how they were meant to be sampled (Llama 3: temperature 0.6, top_p 0.9;
Qwen2.5: also top_k 20 and repetition_penalty 1.05). vLLM uses these values for the fields a
request leaves out, so a client moving from vLLM gets the same answers; a field the request sets
always wins. A value outside the API's range is ignored with a warning rather than failing start-up.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from kvfence.errors import ConfigError

__all__ = [
    "GENERATION_CONFIG_MODES",
    "SAMPLING_FIELDS",
    "check_generation_config",
    "read_sampling_defaults",
    "sampling_defaults_for",
]

log = logging.getLogger(__name__)

# generation_config.json key -> the range the API accepts for the request field of the same name
SAMPLING_FIELDS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (1e-9, 1.0),
    "top_k": (1, 1 << 30),
    "min_p": (0.0, 1.0),
    "repetition_penalty": (1e-9, math.inf),
}


# Where the defaults come from, as vLLM's --generation-config: the model's file, none, or a directory's file.
GENERATION_CONFIG_MODES = ("auto", "vllm")


def check_generation_config(generation_config: object, *, name: str = "generation_config") -> None:
    """Refuse a value that is neither a mode nor a directory (before the model loads: a typo fails fast)."""
    if not isinstance(generation_config, str) or (
        generation_config not in GENERATION_CONFIG_MODES and not Path(generation_config).expanduser().is_dir()
    ):
        raise ConfigError(f"{name} must be 'auto', 'vllm' or a directory holding a generation_config.json; "
                          f"got {generation_config!r}")


def sampling_defaults_for(generation_config: str, model_dir: Path) -> dict[str, float | int]:
    """The defaults ``generation_config`` names: ``"auto"`` (``model_dir``'s generation_config.json),
    ``"vllm"`` (none: the API's own defaults) or a directory path (that directory's file)."""
    if generation_config == "vllm":
        return {}
    return read_sampling_defaults(model_dir if generation_config == "auto" else Path(generation_config).expanduser())


def read_sampling_defaults(model_dir: Path) -> dict[str, float | int]:
    """The sampling fields ``model_dir/generation_config.json`` sets (empty when there is no such file)."""
    path = model_dir / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}
    if not isinstance(raw, dict):
        return {}
    defaults: dict[str, float | int] = {}
    for name, (low, high) in SAMPLING_FIELDS.items():
        value = raw.get(name)
        if value is None or (name == "top_k" and value == 0):  # top_k 0 means "off" in transformers
            continue
        if not _is_number(value) or not low <= value <= high:
            log.warning("ignoring %s=%r from %s: outside [%g, %g]", name, value, path, low, high)
            continue
        defaults[name] = int(value) if name == "top_k" else float(value)
    return defaults


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
