"""Load a local Hugging Face checkpoint into the model: safetensors (single or sharded, memory-mapped), or
PyTorch ``.bin`` files read with ``torch.load(weights_only=True)`` (tensors only, no pickled code)."""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol, cast

import torch
from safetensors import safe_open

from kvfence.engine.config import ModelConfig
from kvfence.engine.models.families import FAMILIES
from kvfence.engine.models.llama import FusedLinear, LlamaForCausalLM
from kvfence.errors import ModelLoadError

__all__ = ["checkpoint_files", "load_model", "model_class"]

log = logging.getLogger(__name__)

# checkpoint projection name -> (fused module name, shard)
_FUSED = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", "gate"),
    "up_proj": ("gate_up_proj", "up"),
    "o_proj": ("o_proj", ""),
    "down_proj": ("down_proj", ""),
}
_PROJECTION = re.compile(r"^(.*\.)(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.(weight|bias)$")
_IGNORED = re.compile(r"rotary_emb\.inv_freq$|\.masked_bias$")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def checkpoint_files(model_dir: Path) -> list[Path]:
    """The weight files of ``model_dir``: safetensors (single, sharded by index, or any ``*.safetensors``),
    else PyTorch ``.bin`` files (read with ``weights_only``: no pickled code runs). :class:`ModelLoadError`
    names what is missing."""
    for index_name, single_name, pattern in (
        ("model.safetensors.index.json", "model.safetensors", "*.safetensors"),
        ("pytorch_model.bin.index.json", "pytorch_model.bin", "*.bin"),
    ):
        index = model_dir / index_name
        if index.is_file():
            return _indexed_files(model_dir, index)
        single = model_dir / single_name
        if single.is_file():
            return [single]
        files = sorted(f for f in model_dir.glob(pattern) if f.name != "training_args.bin")
        if files:
            return files
    raise ModelLoadError(
        f"model directory {str(model_dir)!r} has no model.safetensors (nor sharded *.safetensors with "
        "model.safetensors.index.json, nor pytorch_model.bin): no weights to load"
    )


def _indexed_files(model_dir: Path, index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ModelLoadError(f"cannot read {index}: {exc}") from exc
    files = [model_dir / name for name in names]
    for f in files:
        if not f.is_file():
            raise ModelLoadError(f"{index.name} lists {f.name}, which is missing from {str(model_dir)!r}")
    return files


def _open_checkpoint(path: Path) -> AbstractContextManager[_TensorSource]:
    """A name -> tensor view of one weight file, memory-mapped where the format allows."""
    if path.suffix == ".safetensors":
        try:
            return cast(AbstractContextManager[_TensorSource], safe_open(str(path), framework="pt", device="cpu"))
        except Exception as exc:  # safetensors raises its own error types
            raise ModelLoadError(f"cannot open {path}: {exc}") from exc
    try:
        # weights_only: a .bin is a pickle, and only plain tensors may come out of it (no code runs)
        state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ... for a bad or unsafe file
        raise ModelLoadError(
            f"cannot load {path} safely (weights_only): {exc}; convert the checkpoint to safetensors"
        ) from exc
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise ModelLoadError(f"{path} does not hold a flat name -> tensor state dict")
    return nullcontext(_StateDict(state))


class _TensorSource(Protocol):
    def keys(self) -> Iterable[str]: ...
    def get_tensor(self, name: str) -> torch.Tensor: ...


class _StateDict:
    """A loaded ``.bin`` state dict with safetensors' ``keys`` / ``get_tensor`` reading interface."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        self._state = state

    def keys(self) -> Iterable[str]:
        return self._state.keys()

    def get_tensor(self, name: str) -> torch.Tensor:
        return self._state[name]


def load_model(
    model_dir: Path, cfg: ModelConfig, *, max_len: int, dtype: torch.dtype, device: torch.device
) -> LlamaForCausalLM:
    """Build the model and fill every parameter from the checkpoint, checking names and shapes.

    A fused module's tensor comes either as its checkpoint shards (``q_proj``, ``k_proj``, ...) or
    whole, as Phi-3 stores ``qkv_proj`` and ``gate_up_proj``."""
    model = model_class(cfg.architecture)(cfg, max_len, dtype, device)
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    expected: set[tuple[str, str]] = set()
    for name, module in modules.items():
        if isinstance(module, FusedLinear):
            for shard in module.shard_rows:
                expected.add((f"{name}.weight", shard))
                if module.bias is not None:
                    expected.add((f"{name}.bias", shard))
    for name in params:
        if not any(name == p for p, _ in expected):
            expected.add((name, ""))
    loaded: set[tuple[str, str]] = set()

    for path in checkpoint_files(model_dir):
        with _open_checkpoint(path) as f:
            for ckpt_name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                target = _target(ckpt_name, cfg)
                if target is None:
                    continue
                param_name, shard = target
                whole = _whole_fused(modules, param_name, shard)
                if whole:  # one tensor for every shard of a fused module
                    _copy_whole(params[param_name], ckpt_name, f.get_tensor(ckpt_name))
                    loaded.update((param_name, s) for s in whole)
                    continue
                if (param_name, shard) not in expected:
                    log.debug("ignoring checkpoint tensor %s", ckpt_name)
                    continue
                _copy(model, modules, params, param_name, shard, ckpt_name, f.get_tensor(ckpt_name))
                loaded.add((param_name, shard))

    missing = sorted(expected - loaded)
    if missing:
        shown = ", ".join(_checkpoint_name(p, s) for p, s in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ModelLoadError(f"checkpoint in {str(model_dir)!r} is missing tensors: {shown}{more}")
    return model.eval()


def model_class(architecture: str) -> type[LlamaForCausalLM]:
    """The model class of a supported ``architecture`` (:data:`FAMILIES` names it), imported now."""
    module_name, _, class_name = FAMILIES[architecture].model_class.partition(":")
    return cast(type[LlamaForCausalLM], getattr(importlib.import_module(module_name), class_name))


def _whole_fused(modules: dict[str, torch.nn.Module], param_name: str, shard: str) -> list[str]:
    """The shards of the fused module ``param_name`` belongs to, when a checkpoint tensor holds them all."""
    module = modules.get(param_name.rsplit(".", 1)[0])
    if shard or not isinstance(module, FusedLinear) or list(module.shard_rows) == [""]:
        return []
    return list(module.shard_rows)


def _copy_whole(param: torch.nn.Parameter, ckpt_name: str, tensor: torch.Tensor) -> None:
    if tuple(tensor.shape) != tuple(param.shape):
        raise ModelLoadError(
            f"tensor {ckpt_name} has shape {tuple(tensor.shape)}, config.json implies {tuple(param.shape)}"
        )
    with torch.no_grad():
        param.data.copy_(tensor.to(dtype=param.dtype))


def _target(ckpt_name: str, cfg: ModelConfig) -> tuple[str, str] | None:
    if _IGNORED.search(ckpt_name):
        return None
    if ckpt_name == "lm_head.weight" and cfg.tie_word_embeddings:
        return None  # tied: the embedding is the head
    layer = _LAYER.match(ckpt_name)
    if layer and int(layer.group(1)) >= cfg.num_hidden_layers:
        return None
    m = _PROJECTION.match(ckpt_name)
    if m:
        prefix, proj, kind = m.groups()
        fused, shard = _FUSED[proj]
        return f"{prefix}{fused}.{kind}", shard
    if ckpt_name == "lm_head.weight":
        return "lm_head.weight", ""
    return ckpt_name, ""


def _checkpoint_name(param_name: str, shard: str) -> str:
    for proj, (fused, s) in _FUSED.items():
        if s == shard and f".{fused}." in param_name:
            return param_name.replace(f".{fused}.", f".{proj}.")
    return param_name


def _copy(
    model: LlamaForCausalLM,
    modules: dict[str, torch.nn.Module],
    params: dict[str, torch.nn.Parameter],
    param_name: str,
    shard: str,
    ckpt_name: str,
    tensor: torch.Tensor,
) -> None:
    param = params[param_name]
    module = modules.get(param_name.rsplit(".", 1)[0])
    dest = param.data
    if isinstance(module, FusedLinear):
        start, rows = module.shard_rows[shard]
        dest = dest.narrow(0, start, rows)
    if tuple(tensor.shape) != tuple(dest.shape):
        raise ModelLoadError(
            f"tensor {ckpt_name} has shape {tuple(tensor.shape)}, config.json implies {tuple(dest.shape)}"
        )
    with torch.no_grad():
        dest.copy_(tensor.to(dtype=dest.dtype))
