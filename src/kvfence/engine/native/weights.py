"""A local safetensors checkpoint (single or sharded) read straight into numpy arrays for the native runtime.

Each tensor is read with plain file reads into the array it belongs in (no memory map, whose pages
would count in the resident memory while the file stays open): q/k/v into the rows of the fused
``qkv`` [(H + 2 KV) * D, hidden], gate/up into ``gate_up`` [2 * inter, hidden], as the torch loader
fuses them (Phi-3's already-fused tensors are read whole). A tensor stored in another dtype than its
array passes through a bounce buffer of at most :data:`~kvfence.engine.runner.loader.BOUNCE_BYTES`
(8 MiB), rounded as torch's ``.to()`` rounds.

The matrix weights and the token embedding are stored in the model dtype (float32, bfloat16 as
``uint16``, float16) and widened by the kernels as they are read; norms and biases are float32, as
under the torch runtime on the CPU (:mod:`kvfence.engine.kernels.half_weights`).

:func:`unsupported` names what this runtime does not run (other families, partial rotary, other
activations, LongRoPE ...); the runner raises it as a :class:`ConfigError`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvfence.engine.config import ModelConfig
from kvfence.engine.native.dtypes import STORAGE, to_dtype
from kvfence.engine.native.memory import packed_empty
from kvfence.engine.native.rope import unsupported_rope
from kvfence.engine.runner.checkpoint import SafetensorsFile, checkpoint_files
from kvfence.errors import ModelLoadError

__all__ = ["NATIVE_ARCHITECTURES", "LayerWeights", "ModelWeights", "load_weights", "unsupported"]

log = logging.getLogger(__name__)

NATIVE_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                        "Phi3ForCausalLM")
"""The families whose decoder layer the fused kernels compute (Gemma 3's is not one)."""

_BOUNCE_BYTES = 8 << 20  # as the torch loader's BOUNCE_BYTES
_READ_AS = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16}
_SOURCE_OF = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_IGNORED = re.compile(r"rotary_emb\.inv_freq$|\.masked_bias$")


def unsupported(cfg: ModelConfig) -> list[str]:
    """What of ``cfg`` the native runtime does not run (empty: all of it runs)."""
    problems = []
    if cfg.architecture not in NATIVE_ARCHITECTURES:
        problems.append(f"architecture {cfg.architecture} (the native runtime runs {', '.join(NATIVE_ARCHITECTURES)})")
    if cfg.hidden_act not in ("silu", "swish"):
        problems.append(f"hidden_act {cfg.hidden_act!r} (the fused kernels compute silu)")
    if cfg.rotary_dim != cfg.head_dim:
        problems.append(f"partial_rotary_factor={cfg.partial_rotary_factor} (the kernels rotate whole heads)")
    if (why := unsupported_rope(cfg.rope_scaling)) is not None:
        problems.append(why)
    if cfg.final_logit_softcapping is not None:
        problems.append("final_logit_softcapping")
    if cfg.local_rope_theta is not None or cfg.local_rope_scaling is not None:
        problems.append("a second RoPE for windowed layers")
    if cfg.head_dim % 2:
        problems.append(f"an odd head_dim ({cfg.head_dim})")
    return problems


@dataclass
class LayerWeights:
    """One decoder layer: matrix weights in the model dtype, norms and biases float32."""

    input_norm: np.ndarray
    post_norm: np.ndarray
    qkv: np.ndarray
    o: np.ndarray
    gate_up: np.ndarray
    down: np.ndarray
    qkv_bias: np.ndarray | None = None
    o_bias: np.ndarray | None = None
    gate_up_bias: np.ndarray | None = None
    down_bias: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None


@dataclass
class ModelWeights:
    """The whole model; ``lm_head`` is ``None`` when tied to ``embed``."""

    dtype: str
    embed: np.ndarray
    norm: np.ndarray
    layers: list[LayerWeights]
    lm_head: np.ndarray | None = None
    nbytes: int = field(default=0)

    @property
    def head(self) -> np.ndarray:
        return self.embed if self.lm_head is None else self.lm_head


Empty = Callable[[tuple[int, ...], type[np.generic]], np.ndarray]


def _allocate(cfg: ModelConfig, dtype: str, empty: Empty) -> tuple[ModelWeights, dict[str, tuple[np.ndarray, int, str]]]:
    """Every array (from ``empty``, in a fixed order), and checkpoint name -> (destination, first row,
    the destination's dtype name)."""
    wd = STORAGE[dtype]
    hidden, inter, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    heads, kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    q_rows, kv_rows = heads * d, kv * d
    o_bias = cfg.attention_bias and cfg.architecture != "Qwen2ForCausalLM"  # as models/llama.py

    def mat(*shape: int) -> np.ndarray:
        return empty(shape, wd)

    def f32(*shape: int) -> np.ndarray:
        return empty(shape, np.float32)

    model = ModelWeights(dtype, mat(vocab, hidden), f32(hidden), [],
                         None if cfg.tie_word_embeddings else mat(vocab, hidden))
    targets: dict[str, tuple[np.ndarray, int, str]] = {
        "model.embed_tokens.weight": (model.embed, 0, dtype),
        "model.norm.weight": (model.norm, 0, "float32"),
    }
    if model.lm_head is not None:
        targets["lm_head.weight"] = (model.lm_head, 0, dtype)
    for i in range(cfg.num_hidden_layers):
        layer = LayerWeights(
            f32(hidden), f32(hidden), mat(q_rows + 2 * kv_rows, hidden), mat(hidden, q_rows), mat(2 * inter, hidden),
            mat(hidden, inter),
            qkv_bias=f32(q_rows + 2 * kv_rows) if cfg.attention_bias else None,
            o_bias=f32(hidden) if o_bias else None,
            gate_up_bias=f32(2 * inter) if cfg.mlp_bias else None,
            down_bias=f32(hidden) if cfg.mlp_bias else None,
            q_norm=f32(d) if cfg.qk_norm else None,
            k_norm=f32(d) if cfg.qk_norm else None,
        )
        model.layers.append(layer)
        p = f"model.layers.{i}."
        parts: list[tuple[str, np.ndarray | None, int, str]] = [
            ("input_layernorm.weight", layer.input_norm, 0, "float32"),
            ("post_attention_layernorm.weight", layer.post_norm, 0, "float32"),
            ("self_attn.o_proj.weight", layer.o, 0, dtype),
            ("self_attn.o_proj.bias", layer.o_bias, 0, "float32"),
            ("mlp.down_proj.weight", layer.down, 0, dtype),
            ("mlp.down_proj.bias", layer.down_bias, 0, "float32"),
            ("self_attn.q_norm.weight", layer.q_norm, 0, "float32"),
            ("self_attn.k_norm.weight", layer.k_norm, 0, "float32"),
        ]
        for kind, weight in (("weight", layer.qkv), ("bias", layer.qkv_bias)):
            for proj, first in (("q_proj", 0), ("k_proj", q_rows), ("v_proj", q_rows + kv_rows)):
                parts.append((f"self_attn.{proj}.{kind}", weight, first, dtype if kind == "weight" else "float32"))
        for kind, weight in (("weight", layer.gate_up), ("bias", layer.gate_up_bias)):
            for proj, first in (("gate_proj", 0), ("up_proj", inter)):
                parts.append((f"mlp.{proj}.{kind}", weight, first, dtype if kind == "weight" else "float32"))
        for name, dest, first, kind in parts:
            if dest is not None:
                targets[p + name] = (dest, first, kind)
        if cfg.architecture == "Phi3ForCausalLM":  # stored fused: either form is read
            targets[p + "self_attn.qkv_proj.weight"] = (layer.qkv, 0, dtype)
            targets[p + "mlp.gate_up_proj.weight"] = (layer.gate_up, 0, dtype)
    return model, targets


_FUSED_WHOLE = {"self_attn.qkv_proj.weight": ("q_proj", "k_proj", "v_proj"),
                "mlp.gate_up_proj.weight": ("gate_proj", "up_proj")}


def load_weights(model_dir: Path, cfg: ModelConfig, dtype: str) -> ModelWeights:
    """Every weight of the checkpoint in ``model_dir`` in its array (``dtype``: the model dtype name);
    :class:`ModelLoadError` for a missing tensor, a wrong shape, a ``.bin`` checkpoint or a tensor dtype
    other than F32, BF16 or F16."""
    specs: list[tuple[tuple[int, ...], type[np.generic]]] = []

    def record(shape: tuple[int, ...], dt: type[np.generic]) -> np.ndarray:
        specs.append((shape, dt))
        return np.lib.stride_tricks.as_strided(np.empty(1, dtype=dt), shape, (0,) * len(shape))  # no memory

    _allocate(cfg, dtype, record)  # a first pass sizes the one buffer (on huge pages) they all live in
    arrays = iter(packed_empty(specs))
    model, targets = _allocate(cfg, dtype, lambda shape, dt: next(arrays))
    loaded: set[str] = set()
    for path in checkpoint_files(model_dir):
        if path.suffix != ".safetensors":
            raise ModelLoadError(f"{path.name}: the native runtime reads safetensors only; convert the checkpoint "
                                 "to safetensors, or use --runtime torch")
        with SafetensorsFile(path) as f:
            for name in f.keys():  # noqa: SIM118 - SafetensorsFile has no __iter__
                if _IGNORED.search(name) or (name == "lm_head.weight" and cfg.tie_word_embeddings):
                    continue
                layer = _LAYER.match(name)
                if layer and int(layer.group(1)) >= cfg.num_hidden_layers:
                    continue
                target = targets.get(name)
                if target is None:
                    log.debug("ignoring checkpoint tensor %s", name)
                    continue
                dest, first, kind = target
                shape = f.shape(name)
                view = dest[first : first + shape[0]] if shape else dest  # a fused shard: its rows
                if shape != view.shape:
                    raise ModelLoadError(f"tensor {name} has shape {shape}, config.json implies {view.shape}")
                _read_into(f, name, view, kind)
                loaded.add(name)
                if layer and (shards := _FUSED_WHOLE.get(layer.group(2))):
                    prefix = name.removesuffix(layer.group(2))
                    module = layer.group(2).split(".")[0]
                    loaded.update(f"{prefix}{module}.{s}.weight" for s in shards)
    missing = sorted(n for n in targets if n not in loaded and not _is_fused_alias(n, loaded))
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ModelLoadError(f"checkpoint in {str(model_dir)!r} is missing tensors: {', '.join(missing[:5])}{more}")
    model.nbytes = sum(a.nbytes for a in _arrays(model))
    return model


def _is_fused_alias(name: str, loaded: set[str]) -> bool:
    """A Phi-3 fused name whose shards came separately (or the reverse) is not missing."""
    for whole, shards in _FUSED_WHOLE.items():
        module = whole.split(".")[0]
        if name.endswith("." + whole):
            prefix = name.removesuffix(whole)
            return all(f"{prefix}{module}.{s}.weight" in loaded for s in shards)
    return False


def _arrays(model: ModelWeights) -> list[np.ndarray]:
    out = [model.embed, model.norm, *([] if model.lm_head is None else [model.lm_head])]
    for layer in model.layers:
        out.extend(a for a in vars(layer).values() if a is not None)
    return out


def _read_into(f: SafetensorsFile, name: str, dest: np.ndarray, dtype: str) -> None:
    """Fill the C-contiguous ``dest`` (model dtype ``dtype``) with tensor ``name``, converting as it goes."""
    entry = f.seek_tensor(name)
    source = entry.dtype
    if source not in _READ_AS:
        raise ModelLoadError(f"{f.path}: tensor {name} is {source}; the native runtime reads F32, BF16 and F16")
    if dest.size == 0:
        return
    flat = dest.reshape(-1)  # a view: dest is contiguous
    if _SOURCE_OF[dtype] == source:
        f.read_exact(flat.view(np.uint8).data, entry.end - entry.begin, name)  # straight into the array
        return
    item = np.dtype(_READ_AS[source]).itemsize
    step = max(1, _BOUNCE_BYTES // item)
    bounce = np.empty(min(step, flat.size), dtype=_READ_AS[source])
    for start in range(0, flat.size, step):
        n = min(step, flat.size - start)
        chunk = bounce[:n]
        f.read_exact(chunk.view(np.uint8).data, n * item, name)
        flat[start : start + n] = to_dtype(chunk, source, dtype)
