"""Load a local Hugging Face checkpoint (safetensors, single or sharded, memory-mapped) into the model."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import torch
from safetensors import safe_open

from kvfence.engine.config import ModelConfig
from kvfence.engine.models.llama import FusedLinear, LlamaForCausalLM
from kvfence.errors import ModelLoadError

__all__ = ["checkpoint_files", "load_model"]

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
    """The safetensors files of ``model_dir``; :class:`ModelLoadError` names what is missing."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"cannot read {index}: {exc}") from exc
        files = [model_dir / name for name in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise ModelLoadError(f"{index.name} lists {f.name}, which is missing from {str(model_dir)!r}")
        return files
    single = model_dir / "model.safetensors"
    if single.is_file():
        return [single]
    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        return files
    hint = " (pytorch_model.bin is not loaded: convert it to safetensors)" if any(model_dir.glob("*.bin")) else ""
    raise ModelLoadError(f"model directory {str(model_dir)!r} has no model.safetensors{hint}")


def load_model(
    model_dir: Path, cfg: ModelConfig, *, max_len: int, dtype: torch.dtype, device: torch.device
) -> LlamaForCausalLM:
    """Build the model and fill every parameter from the checkpoint, checking names and shapes."""
    model = LlamaForCausalLM(cfg, max_len, dtype, device)
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
        try:
            handle = safe_open(str(path), framework="pt", device="cpu")  # memory-mapped
        except Exception as exc:  # safetensors raises its own error types
            raise ModelLoadError(f"cannot open {path}: {exc}") from exc
        with handle as f:
            for ckpt_name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                target = _target(ckpt_name, cfg)
                if target is None:
                    continue
                param_name, shard = target
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
