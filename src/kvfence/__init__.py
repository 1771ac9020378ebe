"""kvfence: an LLM serving stack where one tenant's prompt never reaches another tenant's answer.

Five parts share this package (DESIGN.md of the project has the isolation contract I1-I6):

- :mod:`kvfence.engine` -- the paged-KV inference engine (``kvfence generate``, the Python API); I1, I2
  and I6 are enforced in :mod:`kvfence.engine.kv`, admission (I3) in its scheduler and capacity.
- :mod:`kvfence.server` -- ``kvfence serve``, the OpenAI-compatible server (I3 and I5 at the edge).
- :mod:`kvfence.disagg` -- ``kvfence serve --disagg``: prefill and decode processes with a verified
  KV handoff (I4).
- :mod:`kvfence.gateway` -- ``kvfence gateway``, a proxy in front of any backend: pseudonymisation,
  caps against real capacity, routing by data class, secret cache salts, leak detection.
- :mod:`kvfence.audit` -- ``kvfence audit``, black-box isolation tests of any endpoint.

:mod:`kvfence.scope` (cache scopes from authenticated identities, I5) is shared by all of them.

The engine's API is at the top level, as vLLM's is, imported on first use so that ``import kvfence``
stays light (no torch)::

    from kvfence import LLM, SamplingParams
    llm = LLM()                      # built-in random-weight model; LLM(model="/path/to/hf-dir")
    llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvfence.engine.llm import LLM
    from kvfence.engine.sampling.sampling_params import SamplingParams
    from kvfence.scope import CacheScope, TenantIdentity

__version__ = "0.1.0"
__all__ = ["LLM", "CacheScope", "SamplingParams", "TenantIdentity", "__version__"]

_HOME = {
    "LLM": "kvfence.engine.llm",
    "SamplingParams": "kvfence.engine.sampling.sampling_params",
    "CacheScope": "kvfence.scope",
    "TenantIdentity": "kvfence.scope",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'kvfence' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
