"""The command-line options that configure the engine, shared by ``generate``, ``serve`` and ``disagg``.

One definition per option, so the three commands spell, document and validate them the same way;
:func:`engine_config` turns the parsed values into an :class:`~kvfence.engine.config.EngineConfig`
(which validates them once more and names the option to change).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kvfence.engine.config import SUPPORTED_RUNTIMES, EngineConfig
from kvfence.engine.runner.dtype_names import DTYPE_ALIASES, parse_dtype
from kvfence.errors import ConfigError

__all__ = [
    "ENGINE_OPTION_NAMES",
    "engine_config",
    "engine_options",
    "generation_config_option",
    "parse_dtype",
    "parse_max_model_len",
    "parse_size",
]

F = TypeVar("F", bound=Callable[..., Any])

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
          "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def parse_size(text: str) -> int:
    """Bytes from ``"8GiB"``, ``"512MB"``, ``"2G"`` (binary) or a plain number of bytes."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ConfigError(f"cannot read {text!r} as a size; use e.g. 8GiB, 512MiB, 2G or a number of bytes")
    return int(float(match.group(1)) * _UNITS[unit])


def parse_max_model_len(value: str | None) -> int | str | None:
    """``--max-model-len``: a positive integer, ``auto``, or unset (the model's own maximum)."""
    if value is None or value == "auto":
        return value
    if value.strip().isdigit() and int(value) > 0:
        return int(value)
    raise ConfigError(f"--max-model-len must be a positive integer or 'auto', got {value!r}")


_OPTIONS = [
    click.option("--model", type=click.Path(file_okay=False, path_type=Path), default=None,
                 help="Local Hugging Face model directory (config.json, tokenizer.json, *.safetensors), or a "
                      "hub id (org/name) already in the local Hugging Face cache (nothing is downloaded). "
                      "Default: the built-in small random-weight model (gibberish output, for testing)."),
    click.option("--max-model-len", default=None, metavar="N|auto",
                 help="Advertised maximum context (prompt + completion). Refused at start-up if the KV pool "
                      "cannot hold it (I3); 'auto' lowers it to fit. Default: the model's maximum."),
    click.option("--kv-cache-tokens", type=int, default=None, help="Size the KV pool to hold this many tokens."),
    click.option("--kv-cache-memory", default=None, metavar="SIZE",
                 help="Size the KV pool by memory instead, e.g. 4GiB, 512MiB or a number of bytes."),
    click.option("--page-size", type=int, default=16, show_default=True, help="Tokens per KV page."),
    click.option("--dtype", type=click.Choice(list(DTYPE_ALIASES), case_sensitive=False), default="float32",
                 show_default=True,
                 help="Weight and KV-cache dtype (vLLM's spellings too: half, bf16, float ...). On the CPU "
                      "bfloat16/float16 store the weights in 2 bytes and compute in float32. 'auto': the "
                      "checkpoint's bfloat16/float16 on a GPU, float32 on the CPU."),
    click.option("--kv-cache-dtype", type=click.Choice(list(DTYPE_ALIASES), case_sensitive=False),
                 default="auto", show_default=True,
                 help="KV pool dtype: 'auto' is the model's dtype; bfloat16/float16 (bf16, fp16, half) under a "
                      "float32 model halve the pool's bytes per token, K/V rounded on write."),
    click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N]."),
    click.option("--runtime", type=click.Choice(list(SUPPORTED_RUNTIMES)), default="torch", show_default=True,
                 help="What computes: torch (PyTorch, CPU or CUDA, every model family) or native (kvfence's CPU "
                      "kernels from NumPy, no PyTorch in the process: about 220 MB less memory; Llama, Qwen2, "
                      "Mistral, Qwen3; every sampling option)."),
    click.option("--max-num-seqs", type=int, default=64, show_default=True,
                 help="Most sequences decoded together in one batch."),
    click.option("--max-num-batched-tokens", type=int, default=2048, show_default=True,
                 help="Token budget of one engine step (decode tokens plus prefill chunks)."),
    click.option("--max-prefill-chunk", type=int, default=512, show_default=True,
                 help="Longest piece of one prompt prefilled in one step."),
    click.option("--num-threads", "--threads", "num_threads", type=int, default=None, metavar="N",
                 help="Torch CPU threads for the engine (default: torch's choice). On a busy CPU, 1 gives "
                      "steadier time to first token."),
    click.option("--unsafe-no-scrub", "--no-scrub", "unsafe_no_scrub", is_flag=True,
                 help="UNSAFE, benchmarks only: do not zero freed KV pages (breaks I2)."),
    click.option("--prefix-cache-tokens", type=click.IntRange(min=0), default=None, metavar="N",
                 help="Most tokens of prefix-cache pages kept for same-scope reuse once no request maps them "
                      "(whole pages). One scope's cache never makes room for another scope's request (I6), so the "
                      "pool minus this must hold a max-length request. Default: the pool minus one max-length "
                      "request; 0 keeps none."),
    click.option("--prefix-cache-scope-tokens", type=click.IntRange(min=1), default=None, metavar="N",
                 help="The prefix-cache share each scope keeps however many scopes are active (at most budget/N "
                      "scopes cache at once; the least recently active loses its cache). Default: 1/8 of the budget."),
    click.option("--unsafe-shared-prefix-cache", is_flag=True,
                 help="UNSAFE, benchmarks only: one prefix-cache LRU for every scope, so another tenant's prompt "
                      "length shows in a tenant's cached tokens and time to first token (breaks I6)."),
    click.option("--verify-isolation", is_flag=True,
                 help="Paranoid mode: re-check I1 on every step; a violation aborts the request and is "
                      "counted as an isolation incident."),
]


def generation_config_option(fn: F) -> F:
    """``--generation-config auto|vllm|DIR``: where the sampling fields a caller leaves out come from, as
    vLLM's option (see :func:`kvfence.engine.sampling.generation_defaults.sampling_defaults_for`)."""
    return click.option(
        "--generation-config", default="auto", show_default=True, metavar="auto|vllm|DIR",
        help="auto: sampling options left out (temperature, top_p, top_k, min_p, repetition_penalty) take the "
             "model's generation_config.json values, as vLLM does; vllm: none of them; DIR: that directory's "
             "generation_config.json.",
    )(fn)


# The parameter names the options above add to a command's keyword arguments.
ENGINE_OPTION_NAMES = ("model", "max_model_len", "kv_cache_tokens", "kv_cache_memory", "page_size", "dtype",
                       "kv_cache_dtype", "device", "runtime", "max_num_seqs", "max_num_batched_tokens", "max_prefill_chunk", "num_threads",
                       "unsafe_no_scrub", "prefix_cache_tokens", "prefix_cache_scope_tokens",
                       "unsafe_shared_prefix_cache", "verify_isolation")


def engine_options(fn: F) -> F:
    """Add every engine option to a click command (in the order of ``--help``)."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


def engine_config(opts: dict[str, Any], **extra: Any) -> EngineConfig:
    """An ``EngineConfig`` from the parsed engine options (plus ``extra`` fields such as ``seed``)."""
    memory = opts["kv_cache_memory"]
    return EngineConfig(
        model=str(opts["model"]) if opts["model"] is not None else None,
        max_model_len=parse_max_model_len(opts["max_model_len"]),  # type: ignore[arg-type]
        kv_cache_tokens=opts["kv_cache_tokens"],
        kv_cache_memory=parse_size(str(memory)) if memory is not None else None,
        page_size=opts["page_size"],
        # native runs on the CPU: "auto" must not ask torch whether a GPU exists
        dtype=parse_dtype(opts["dtype"], opts["model"], "cpu" if opts["runtime"] == "native" else opts["device"]),  # type: ignore[arg-type]
        # the same spellings as --dtype; "auto" stays "auto" (the model's dtype)
        kv_cache_dtype=DTYPE_ALIASES[opts["kv_cache_dtype"].lower()],  # type: ignore[arg-type]
        device=opts["device"],
        runtime=opts["runtime"],
        max_num_seqs=opts["max_num_seqs"],
        max_num_batched_tokens=opts["max_num_batched_tokens"],
        max_prefill_chunk=opts["max_prefill_chunk"],
        num_threads=opts["num_threads"],
        scrub=not opts["unsafe_no_scrub"],
        prefix_cache_tokens=opts["prefix_cache_tokens"],
        prefix_cache_scope_tokens=opts["prefix_cache_scope_tokens"],
        unsafe_shared_prefix_cache=opts["unsafe_shared_prefix_cache"],
        verify_isolation=opts["verify_isolation"],
        **extra,
    )
