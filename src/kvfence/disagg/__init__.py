"""kvfence.disagg: disaggregated prefill/decode whose KV handoff is verified (invariant I4).

A prefill worker process (:mod:`kvfence.disagg.prefill_worker`) runs prompts and sends each
request's KV pages with a manifest (:mod:`kvfence.disagg.protocol`); the decode side
(:class:`kvfence.disagg.engine.DisaggregatedEngine`, the ``LLMEngine`` interface) verifies the
manifest and every page (:mod:`kvfence.disagg.handoff`) before it decodes or answers anything.
Both sides run the engine's own step (:class:`kvfence.engine.core.engine_core.EngineCore`), so the
scrubbing (I2), paranoid checks (I1) and fault isolation are the single-process engine's.
Transport: ZeroMQ with versioned framing (:mod:`kvfence.disagg.wire`).

Exports are lazy, so importing the pure protocol does not pull in torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvfence.disagg.config import DisaggConfig
    from kvfence.disagg.engine import DisaggregatedEngine, DisaggRequestOutput, DisaggStats
    from kvfence.disagg.protocol import HandoffError, HandoffFailure

__all__ = [
    "DisaggConfig",
    "DisaggRequestOutput",
    "DisaggStats",
    "DisaggregatedEngine",
    "HandoffError",
    "HandoffFailure",
]

_HOME = {
    "DisaggConfig": "config",
    "DisaggRequestOutput": "engine",
    "DisaggStats": "engine",
    "DisaggregatedEngine": "engine",
    "HandoffError": "protocol",
    "HandoffFailure": "protocol",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'kvfence.disagg' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kvfence.disagg.{module}"), name)
