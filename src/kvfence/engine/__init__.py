"""kvfence.engine: a paged-KV inference engine where tenant isolation is an allocator invariant.

Public API (imported lazily, so ``import kvfence.scope`` does not pull in torch)::

    from kvfence.engine import LLM, SamplingParams
    llm = LLM()                      # built-in random-weight model; LLM(model="/path/to/hf-dir")
    llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0))

``LLMEngine`` is the step-wise engine the server drives.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvfence.engine.config import EngineConfig
    from kvfence.engine.core.llm_engine import LLMEngine
    from kvfence.engine.core.outputs import EngineStats, RequestOutput
    from kvfence.engine.kv.capacity import Capacity
    from kvfence.engine.llm import LLM, CompletionOutput
    from kvfence.engine.runner.default_model import DEFAULT_MODEL_NAME, ensure_default_model
    from kvfence.engine.sampling.sampling_params import SamplingParams
    from kvfence.engine.text.tokenizer import Tokenizer
    from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key

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
    "Capacity": "kvfence.engine.kv.capacity",
    "EngineConfig": "kvfence.engine.config",
    "DEFAULT_MODEL_NAME": "kvfence.engine.runner.default_model",
    "ensure_default_model": "kvfence.engine.runner.default_model",
    "LLM": "kvfence.engine.llm",
    "CompletionOutput": "kvfence.engine.llm",
    "LLMEngine": "kvfence.engine.core.llm_engine",
    "EngineStats": "kvfence.engine.core.outputs",
    "RequestOutput": "kvfence.engine.core.outputs",
    "SamplingParams": "kvfence.engine.sampling.sampling_params",
    "CacheScope": "kvfence.scope",
    "TenantIdentity": "kvfence.scope",
    "compute_scope_key": "kvfence.scope",
    "Tokenizer": "kvfence.engine.text.tokenizer",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'kvfence.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
