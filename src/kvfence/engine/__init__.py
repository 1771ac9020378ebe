"""kvfence.engine: a paged-KV inference engine where tenant isolation is an allocator invariant.

Public API (imported lazily, so ``import kvfence.engine.scope`` does not pull in torch)::

    from kvfence.engine import LLM, SamplingParams
    llm = LLM()                      # built-in random-weight model; LLM(model="/path/to/hf-dir")
    llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0))

``LLMEngine`` is the step-wise engine the server drives.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvfence.engine.capacity import Capacity
    from kvfence.engine.config import EngineConfig
    from kvfence.engine.default_model import DEFAULT_MODEL_NAME, ensure_default_model
    from kvfence.engine.llm import LLM, CompletionOutput
    from kvfence.engine.llm_engine import LLMEngine
    from kvfence.engine.outputs import EngineStats, RequestOutput
    from kvfence.engine.sampling_params import SamplingParams
    from kvfence.engine.scope import CacheScope, TenantIdentity, compute_scope_key
    from kvfence.engine.tokenizer import Tokenizer

__all__ = [
    "DEFAULT_MODEL_NAME",
    "LLM",
    "CacheScope",
    "Capacity",
    "CompletionOutput",
    "EngineConfig",
    "EngineStats",
    "LLMEngine",
    "RequestOutput",
    "SamplingParams",
    "TenantIdentity",
    "Tokenizer",
    "compute_scope_key",
    "ensure_default_model",
]

_HOME = {
    "Capacity": "capacity",
    "EngineConfig": "config",
    "DEFAULT_MODEL_NAME": "default_model",
    "ensure_default_model": "default_model",
    "LLM": "llm",
    "CompletionOutput": "llm",
    "LLMEngine": "llm_engine",
    "EngineStats": "outputs",
    "RequestOutput": "outputs",
    "SamplingParams": "sampling_params",
    "CacheScope": "scope",
    "TenantIdentity": "scope",
    "compute_scope_key": "scope",
    "Tokenizer": "tokenizer",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'kvfence.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kvfence.engine.{module}"), name)
