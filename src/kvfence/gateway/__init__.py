"""kvfence.gateway: a tenant-aware proxy in front of any OpenAI-compatible backend.

Request path, in order (each sub-package one concern; the pure modules do no I/O and are tested on plain data):

- ``policy/``: the typed policy file, tenants (hashed keys), upstream accounts, per-tenant plans;
- ``admission/``: request shape, token counts, caps against the backend's real capacity (I3), limits;
- ``hooks.py``: the interface data protection (``protection/``) plugs into;
- ``routing/``: which backends a data class may reach (pure), and gateway-chosen cache salts (I5);
- ``proxy.py``: the request path; ``answer/``: the answer path through the hooks' filters;
- ``transport/``: the HTTP servers and upstream clients, streaming, hang-ups;
- ``records/``: the audit log and trace (no prompt text), Prometheus metrics;
- ``workers/``: several worker processes on one port, and what they share;
- ``runtime.py``: the state of one running gateway; ``reload.py``: policy reload without a restart (SIGHUP),
  requests in flight keep the policy they started with; ``app.py``: ASGI routes; ``cli.py``: ``kvfence gateway``
  (``keys`` edits tenant keys through ``policy/keys.py``).

The hook API (``hooks.py``) is exported here, imported on first use so that ``import kvfence.gateway``
stays light::

    from kvfence.gateway import RequestContext, RequestHook, ResponseFilter
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvfence.gateway.hooks import (
        HookFactory,
        IncidentRecorder,
        PassThroughFilter,
        RequestContext,
        RequestHook,
        ResponseFilter,
        new_incident_id,
    )

__all__ = ["HookFactory", "IncidentRecorder", "PassThroughFilter", "RequestContext", "RequestHook",
           "ResponseFilter", "new_incident_id"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("kvfence.gateway.hooks"), name)
    raise AttributeError(f"module 'kvfence.gateway' has no attribute {name!r}")
