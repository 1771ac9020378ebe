"""Typed configuration: the engine's options (validated once) and a model's ``config.json``."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kvfence.engine.models.families import ACTIVATIONS, FAMILIES, UNSUPPORTED_HINTS
from kvfence.engine.runner.dtype_names import parse_dtype
from kvfence.errors import ConfigError, ModelLoadError

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "SUPPORTED_DTYPES",
    "SUPPORTED_KV_CACHE_DTYPES",
    "SUPPORTED_RUNTIMES",
    "EngineConfig",
    "ModelConfig",
    "kvfence_home",
]

SUPPORTED_ARCHITECTURES = tuple(FAMILIES)
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")
SUPPORTED_KV_CACHE_DTYPES = ("auto", *SUPPORTED_DTYPES)
_SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")

log = logging.getLogger(__name__)

DType = Literal["float32", "bfloat16", "float16"]
KVCacheDType = Literal["auto", "float32", "bfloat16", "float16"]
Runtime = Literal["torch", "native"]
SUPPORTED_RUNTIMES = ("torch", "native")


@dataclass
class EngineConfig:
    """Everything the engine needs to start; :meth:`__post_init__` rejects bad values with a clear message.

    ``model=None`` selects the built-in random-weight model. ``max_model_len=None`` takes the model's
    ``max_position_embeddings``; ``"auto"`` lowers it to what the KV pool holds (invariant I3).
    The pool is sized by ``kv_cache_tokens`` or ``kv_cache_memory`` (bytes); with neither, a default
    share of memory is used. ``scrub=False`` is UNSAFE and exists only to measure the cost of I2.

    ``prefix_cache_tokens`` bounds the prefix pages kept for same-scope reuse once no request maps
    them (default ``None``: the pool minus one ``max_model_len`` request; ``0`` keeps none), and
    ``prefix_cache_scope_tokens`` is the share each cache scope keeps however many are active
    (default: an eighth of the budget). One scope's cache never makes room for another scope's
    request and vice versa (invariant I6). ``unsafe_shared_prefix_cache=True`` puts every scope's
    cached pages in one LRU instead: another tenant's prompt length then shows in a tenant's prefix
    hits; only for measuring what the partition costs.

    ``kv_cache_dtype`` is the dtype of the KV pool: ``"auto"`` (the default) is the model's
    ``dtype``; ``"bfloat16"`` or ``"float16"`` under a float32 model store K/V rounded to 2 bytes
    (half the pool memory and half the bytes decode attention reads; attention itself still
    computes in float32 over the rounded values). Greedy outputs then may differ from float32 K/V.

    ``runtime`` is what computes: ``"torch"`` (PyTorch, CPU or CUDA, every family) or ``"native"``
    (the CPU kernels driven from NumPy, no PyTorch in the process: about 220 MB less resident
    memory; Llama-family models; see :mod:`kvfence.engine.core.runtime`).
    """

    model: str | None = None
    max_model_len: int | Literal["auto"] | None = None
    kv_cache_tokens: int | None = None
    kv_cache_memory: int | None = None
    page_size: int = 16
    dtype: DType = "float32"
    kv_cache_dtype: KVCacheDType = "auto"
    device: str = "auto"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_prefill_chunk: int = 512
    scrub: bool = True
    prefix_cache_tokens: int | None = None
    prefix_cache_scope_tokens: int | None = None
    unsafe_shared_prefix_cache: bool = False
    verify_isolation: bool = False
    seed: int = 0
    num_threads: int | None = None
    runtime: Runtime = "torch"

    def __post_init__(self) -> None:
        if self.model is not None and not str(self.model).strip():
            raise ConfigError("model must be a local directory path or None for the built-in model")
        mml = self.max_model_len
        if isinstance(mml, str):
            if mml != "auto":
                raise ConfigError(f"max_model_len must be a positive integer or 'auto', got {mml!r}")
        elif mml is not None and (isinstance(mml, bool) or not isinstance(mml, int) or mml < 1):
            raise ConfigError(f"max_model_len must be a positive integer or 'auto', got {mml!r}")
        _positive_or_none("kv_cache_tokens", self.kv_cache_tokens)
        _positive_or_none("kv_cache_memory", self.kv_cache_memory)
        if self.kv_cache_tokens is not None and self.kv_cache_memory is not None:
            raise ConfigError("give either kv_cache_tokens or kv_cache_memory, not both")
        _positive("page_size", self.page_size)
        _non_negative_or_none("prefix_cache_tokens", self.prefix_cache_tokens)
        _positive_or_none("prefix_cache_scope_tokens", self.prefix_cache_scope_tokens)
        _positive("max_num_seqs", self.max_num_seqs)
        _positive("max_num_batched_tokens", self.max_num_batched_tokens)
        _positive("max_prefill_chunk", self.max_prefill_chunk)
        _positive_or_none("num_threads", self.num_threads)
        if self.runtime not in SUPPORTED_RUNTIMES:
            raise ConfigError(f"runtime must be one of {', '.join(SUPPORTED_RUNTIMES)}, got {self.runtime!r}")
        if self.runtime == "native":
            if self.device not in ("auto", "cpu"):
                raise ConfigError(f"runtime 'native' runs on the CPU only, got device {self.device!r} (use --runtime torch)")
            self.device = "cpu"  # resolved here: asking torch whether CUDA exists would import it
        if isinstance(self.dtype, str):  # vLLM's spellings and "auto" (the Python API takes them too)
            self.dtype = parse_dtype(self.dtype, self.model, self.device)  # type: ignore[assignment]
        if self.dtype not in SUPPORTED_DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(SUPPORTED_DTYPES)}, got {self.dtype!r}")
        if self.kv_cache_dtype not in SUPPORTED_KV_CACHE_DTYPES:
            raise ConfigError(
                f"kv_cache_dtype must be one of {', '.join(SUPPORTED_KV_CACHE_DTYPES)}, got {self.kv_cache_dtype!r}"
            )
        if self.device != "auto" and not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")


    @property
    def resolved_kv_cache_dtype(self) -> DType:
        """The KV pool's dtype: ``kv_cache_dtype``, or the model's ``dtype`` for ``"auto"``."""
        return self.dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _non_negative_or_none(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigError(f"{name} must be an integer >= 0 or None, got {value!r}")


def _positive_or_none(name: str, value: object) -> None:
    if value is not None:
        _positive(name, value)


@dataclass(frozen=True)
class ModelConfig:
    """The fields of a Hugging Face ``config.json`` that the runner uses.

    The last group describes what some families add to the Llama layer (each family's reader in
    :mod:`kvfence.engine.models.families` sets them): per-head RMSNorm of q and k before RoPE
    (``qk_norm``), an attention scale other than ``head_dim ** -0.5``, tanh soft-capping of the
    logits, RoPE on the first ``partial_rotary_factor`` of each head only, and a second RoPE for
    the windowed layers (Gemma 3's local layers).
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    sliding_window: int | None
    hidden_act: str
    bos_token_id: int | None
    eos_token_ids: list[int] = field(default_factory=list)
    checkpoint_dtype: str | None = None
    is_random_weights: bool = False
    name: str = ""
    # Layers that attend over the whole context although the model has a ``sliding_window`` (Qwen2's
    # mixed layouts); every other layer is windowed. Empty: the window (if any) holds on every layer.
    full_attention_layers: frozenset[int] = frozenset()
    qk_norm: bool = False
    attention_scale: float | None = None  # None: head_dim ** -0.5
    final_logit_softcapping: float | None = None
    partial_rotary_factor: float = 1.0
    local_rope_theta: float | None = None  # windowed layers' RoPE, where it is not the model's
    local_rope_scaling: dict[str, Any] | None = None
    # whether max_position_embeddings is stated before the RoPE factor stretches it (Gemma 3: after)
    context_stretched_by_rope: bool = True
    # Phi-3: a sequence that first grows past the LongRoPE threshold is recomputed with the long
    # factors, as transformers' Phi-3 generate recomputes it (kvfence.engine.layers.rope_lengths)
    recompute_at_rope_switch: bool = False

    @classmethod
    def from_dir(cls, model_dir: Path) -> ModelConfig:
        """Read ``model_dir/config.json``; :class:`ModelLoadError` names what is missing or unsupported."""
        path = model_dir / "config.json"
        if not model_dir.is_dir():
            raise ModelLoadError(f"model directory {str(model_dir)!r} does not exist")
        if not path.is_file():
            raise ModelLoadError(f"model directory {str(model_dir)!r} has no config.json")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelLoadError(f"cannot read {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise ModelLoadError(f"{path} is not a JSON object")
        return cls.from_dict(raw, name=raw.get("kvfence_model_name") or model_dir.name)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, name: str = "") -> ModelConfig:
        archs = raw.get("architectures") or []
        arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            shown = ", ".join(archs) if archs else f"model_type {raw.get('model_type')!r}"
            hints = "".join(f" ({UNSUPPORTED_HINTS[a]})" for a in archs if a in UNSUPPORTED_HINTS)
            raise ModelLoadError(
                f"unsupported architecture {shown}{hints}; kvfence runs {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        family = FAMILIES[arch]
        raw = {**family.defaults, **raw}
        try:
            # the family's own fields; its "rope_parameters", if any, are the main layers' RoPE
            extra = family.read(raw)
            rope_raw = {**raw, "rope_parameters": extra.pop("rope_parameters")} if "rope_parameters" in extra else raw
            hidden = int(raw["hidden_size"])
            heads = int(raw["num_attention_heads"])
            partial_rotary = _rope_field(raw, "partial_rotary_factor")
            common: dict[str, Any] = {
                "vocab_size": int(raw["vocab_size"]),
                "hidden_size": hidden,
                "intermediate_size": int(raw["intermediate_size"]),
                "num_hidden_layers": int(raw["num_hidden_layers"]),
                "num_attention_heads": heads,
                "num_key_value_heads": int(raw.get("num_key_value_heads") or heads),
                "head_dim": int(raw.get("head_dim") or hidden // heads),
                "rms_norm_eps": float(raw.get("rms_norm_eps", 1e-6)),
                "rope_theta": _rope_theta(rope_raw),
                "rope_scaling": _rope_scaling(rope_raw),
                "max_position_embeddings": int(raw.get("max_position_embeddings", 2048)),
                "tie_word_embeddings": bool(raw.get("tie_word_embeddings", False)),
                "attention_bias": bool(raw.get("attention_bias", False)),
                "mlp_bias": bool(raw.get("mlp_bias", False)),
                "hidden_act": str(raw.get("hidden_act", "silu")),
                "partial_rotary_factor": 1.0 if partial_rotary is None else float(partial_rotary),
                "bos_token_id": _optional_int(raw.get("bos_token_id")),
                "eos_token_ids": _int_list(raw.get("eos_token_id")),
                "checkpoint_dtype": raw.get("torch_dtype") or raw.get("dtype"),
                "is_random_weights": bool(raw.get("kvfence_random_weights", False)),
            }
            cfg = cls(architecture=arch, name=name, **{**common, **extra})
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"config.json is missing or has a bad value for {exc}") from exc
        quantization = raw.get("quantization_config")
        if quantization:
            method = quantization.get("quant_method", "unknown") if isinstance(quantization, dict) else quantization
            raise ModelLoadError(f"quantized checkpoints are not supported (quantization_config: {method}); "
                                 "use the model's bfloat16/float16/float32 weights")
        if cfg.partial_rotary_factor != 1.0 and not family.partial_rotary:
            raise ModelLoadError(f"partial_rotary_factor={cfg.partial_rotary_factor} is not supported for {arch}: "
                                 "kvfence rotates the whole head there (as transformers does)")
        rotary_dim = int(cfg.head_dim * cfg.partial_rotary_factor)
        if not 0 < rotary_dim <= cfg.head_dim or rotary_dim % 2:
            raise ModelLoadError(f"partial_rotary_factor={cfg.partial_rotary_factor} gives {rotary_dim} rotated "
                                 f"dimensions of head_dim={cfg.head_dim}; it must be an even number from 2 to head_dim")
        if cfg.hidden_act not in ACTIVATIONS:
            raise ModelLoadError(f"unsupported hidden_act {cfg.hidden_act!r} for {arch}; kvfence runs "
                                 f"{', '.join(ACTIVATIONS)}")
        if cfg.num_attention_heads % cfg.num_key_value_heads:
            raise ModelLoadError(
                f"num_attention_heads={cfg.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={cfg.num_key_value_heads}"
            )
        return cfg

    @property
    def max_context_len(self) -> int:
        """The longest context the model's positions cover, as vLLM derives it: ``max_position_embeddings``,
        stretched by the RoPE ``factor`` of static ``linear`` and ``yarn`` scaling (YaRN from its
        ``original_max_position_embeddings``) and of ``dynamic`` NTK (which rescales past
        ``max_position_embeddings`` as a sequence grows). ``llama3`` and ``longrope`` checkpoints already
        state the stretched length, and so do Gemma 3's (vLLM: "already scaled by RoPE scaling")."""
        scaling = self.rope_scaling if self.context_stretched_by_rope else None
        return _max_context_len({"max_position_embeddings": self.max_position_embeddings}, scaling)

    @property
    def rotary_dim(self) -> int:
        """How many leading dimensions of each query and key head RoPE rotates."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V per token across all layers, for an element size of 1 (multiply by it)."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim


def _rope_theta(raw: dict[str, Any]) -> float:
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(raw.get("rope_theta", 10000.0))


def _rope_scaling(raw: dict[str, Any]) -> dict[str, Any] | None:
    # transformers 5 writes `rope_parameters`; older checkpoints write `rope_scaling`.
    params = raw.get("rope_parameters") or raw.get("rope_scaling")
    if not isinstance(params, dict):
        return None
    rope_type = params.get("rope_type") or params.get("type") or "default"
    if rope_type not in _SUPPORTED_ROPE_TYPES:
        raise ModelLoadError(
            f"unsupported rope scaling type {rope_type!r}; supported: {', '.join(_SUPPORTED_ROPE_TYPES)}"
        )
    if rope_type == "default":
        return None
    if rope_type == "longrope" and not isinstance(params.get("short_factor"), list):
        raise ModelLoadError("rope_type 'longrope' needs a short_factor list in rope_parameters / rope_scaling")
    if rope_type == "longrope" and not params.get("original_max_position_embeddings"):
        # Phi-3-style configs keep it at the top level
        original = raw.get("original_max_position_embeddings") or raw.get("max_position_embeddings", 2048)
        params = {**params, "original_max_position_embeddings": int(original)}
    return {**params, "rope_type": rope_type}


def _max_context_len(raw: dict[str, Any], scaling: dict[str, Any] | None) -> int:
    max_positions = int(raw.get("max_position_embeddings", 2048))
    rope_type = (scaling or {}).get("rope_type")
    if scaling is None or rope_type not in ("linear", "yarn", "dynamic"):
        return max_positions
    if scaling.get("factor") is None:  # YaRN without a factor: the stretch max_position_embeddings states
        return max_positions
    base = scaling.get("original_max_position_embeddings") if rope_type == "yarn" else None
    stretched = int(int(base or max_positions) * float(scaling["factor"]))
    return max(max_positions, stretched)


def _rope_field(raw: dict[str, Any], name: str) -> Any:
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and name in params:
        return params[name]
    return raw.get(name)


def _optional_int(value: Any) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else int(value)


def _int_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)]


def kvfence_home() -> Path:
    """Where kvfence keeps built artefacts: ``$KVFENCE_HOME`` or ``~/.cache/kvfence``."""
    env = os.environ.get("KVFENCE_HOME")
    return Path(env) if env else Path.home() / ".cache" / "kvfence"
