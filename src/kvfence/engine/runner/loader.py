"""Load a local Hugging Face checkpoint into the model: safetensors (single or sharded), or PyTorch
``.bin`` files read with ``torch.load(weights_only=True)`` (tensors only, no pickled code).

Safetensors are read with plain file reads straight into the parameters, never memory-mapped: a
mapped file's pages count in the process's resident memory for as long as it stays open, so
loading the 538 MB float32 bench checkpoint into 2-byte weights had peaked at the 270 MB of
weights plus the whole 538 MB file (peak RSS 1,012 MB, against 712 MB once serving). A tensor
in the parameter's dtype is read into the parameter itself; one in another dtype passes through a
bounce buffer of at most :data:`BOUNCE_BYTES`, converted as it goes. Nothing the size of a weight
is allocated besides the weights.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol, cast

import torch

from kvfence.engine.config import ModelConfig
from kvfence.engine.models.families import FAMILIES
from kvfence.engine.models.llama import FusedLinear, LlamaForCausalLM
from kvfence.engine.runner.checkpoint import SafetensorsFile, checkpoint_files
from kvfence.errors import ModelLoadError

__all__ = ["BOUNCE_BYTES", "SafetensorsReader", "checkpoint_files", "load_model", "model_class"]

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


def _open_checkpoint(path: Path) -> AbstractContextManager[_TensorSource]:
    """A name -> tensor reader of one weight file: safetensors read into the destination, ``.bin``
    memory-mapped by torch (its pickle format has no offsets to read from)."""
    if path.suffix == ".safetensors":
        return SafetensorsReader(path)
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
    def shape(self, name: str) -> tuple[int, ...]: ...
    def read_into(self, name: str, dest: torch.Tensor) -> None: ...


class _StateDict:
    """A loaded ``.bin`` state dict with the reader interface."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        self._state = state

    def keys(self) -> Iterable[str]:
        return self._state.keys()

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._state[name].shape)

    def read_into(self, name: str, dest: torch.Tensor) -> None:
        with torch.no_grad():
            dest.copy_(self._state[name])


BOUNCE_BYTES = 8 << 20
"""Most bytes of a tensor held outside its parameter while it is converted to the parameter's dtype."""

_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


class SafetensorsReader(SafetensorsFile):
    """One safetensors file (header checked by :class:`~.checkpoint.SafetensorsFile`), read tensor by
    tensor into torch tensors with ``readinto`` (no memory map)."""

    def __enter__(self) -> SafetensorsReader:
        return self

    def dtype(self, name: str) -> torch.dtype:
        return _SAFETENSORS_DTYPES[self.entries[name].dtype]

    def read_into(self, name: str, dest: torch.Tensor) -> None:
        """Fill ``dest`` (the tensor's shape, any dtype and device) with tensor ``name``."""
        dtype, shape = self.dtype(name), self.shape(name)
        if tuple(dest.shape) != shape:
            raise ModelLoadError(f"{self.path}: tensor {name} has shape {shape}, the destination {tuple(dest.shape)}")
        numel = dest.numel()
        if numel == 0:
            return
        entry = self.seek_tensor(name)
        size = entry.end - entry.begin
        if dest.dtype == dtype and dest.is_cpu and dest.is_contiguous():
            self.read_exact(_bytes_of(dest), size, name)  # straight into the parameter
            return
        flat = dest.view(-1) if dest.is_contiguous() else None
        item = size // numel
        step = max(1, BOUNCE_BYTES // item)
        bounce = torch.empty(min(step, numel), dtype=dtype)
        with torch.no_grad():
            if flat is None:  # a strided destination: convert through a whole-tensor copy (never hit by the loader)
                whole = torch.empty(shape, dtype=dtype)
                self.read_exact(_bytes_of(whole), size, name)
                dest.copy_(whole)
                return
            for start in range(0, numel, step):
                n = min(step, numel - start)
                chunk = bounce[:n]
                self.read_exact(_bytes_of(chunk), n * item, name)
                flat[start : start + n].copy_(chunk)


def _bytes_of(t: torch.Tensor) -> memoryview:
    """A writable view of a contiguous CPU tensor's bytes."""
    return t.reshape(-1).view(torch.uint8).numpy().data


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
            for ckpt_name in f.keys():  # noqa: SIM118 - the readers have no __iter__
                target = _target(ckpt_name, cfg)
                if target is None:
                    continue
                param_name, shard = target
                whole = _whole_fused(modules, param_name, shard)
                if whole:  # one tensor for every shard of a fused module
                    _copy_whole(params[param_name], ckpt_name, f)
                    loaded.update((param_name, s) for s in whole)
                    continue
                if (param_name, shard) not in expected:
                    log.debug("ignoring checkpoint tensor %s", ckpt_name)
                    continue
                _copy(modules, params, param_name, shard, ckpt_name, f)
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


def _copy_whole(param: torch.nn.Parameter, ckpt_name: str, source: _TensorSource) -> None:
    shape = source.shape(ckpt_name)
    if shape != tuple(param.shape):
        raise ModelLoadError(f"tensor {ckpt_name} has shape {shape}, config.json implies {tuple(param.shape)}")
    source.read_into(ckpt_name, param.data)


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
    modules: dict[str, torch.nn.Module],
    params: dict[str, torch.nn.Parameter],
    param_name: str,
    shard: str,
    ckpt_name: str,
    source: _TensorSource,
) -> None:
    param = params[param_name]
    module = modules.get(param_name.rsplit(".", 1)[0])
    dest = param.data
    if isinstance(module, FusedLinear):
        start, rows = module.shard_rows[shard]
        dest = dest.narrow(0, start, rows)
    shape = source.shape(ckpt_name)
    if shape != tuple(dest.shape):
        raise ModelLoadError(f"tensor {ckpt_name} has shape {shape}, config.json implies {tuple(dest.shape)}")
    source.read_into(ckpt_name, dest)
