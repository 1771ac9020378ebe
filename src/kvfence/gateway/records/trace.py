"""What one request leaves behind in the audit log: who, which class, where it went, the caps. No text."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kvfence.gateway.admission.caps import CapResult
from kvfence.gateway.records.audit_log import Decision

__all__ = ["RequestTrace"]


@dataclass
class RequestTrace:
    """What the audit log will say about this request (never its text)."""

    request_id: str
    endpoint: str
    started: float
    tenant: str = "-"
    organization: str = "-"
    workspace: str = "-"
    model: str = ""
    initial_class: str = ""
    data_class: str = ""
    backend: str | None = None
    stream: bool = False
    cap: CapResult | None = None
    salt_injected: bool = False
    salt_stripped: bool = False
    fallbacks: int = 0
    overhead_s: float = 0.0
    annotations: dict[str, Any] = field(default_factory=dict)

    def decision(self, status: int, outcome: str, reason: str | None, *, ended: float | None = None) -> Decision:
        """The row; its latency runs to ``ended`` (``time.perf_counter()``), or to now."""
        cap = self.cap
        return Decision(
            request_id=self.request_id, tenant=self.tenant, organization=self.organization,
            workspace=self.workspace, endpoint=self.endpoint, model=self.model,
            initial_class=self.initial_class, data_class=self.data_class, backend=self.backend,
            status=status, outcome=outcome, reason=reason,
            prompt_tokens=cap.prompt_tokens if cap else None, prompt_limit=cap.prompt_limit if cap else None,
            context_limit=cap.context_limit if cap else None, tokens_cut=cap.tokens_cut if cap else 0,
            stream=self.stream, salt_injected=self.salt_injected, client_salt_stripped=self.salt_stripped,
            fallbacks=self.fallbacks,
            latency_ms=((time.perf_counter() if ended is None else ended) - self.started) * 1000,
            overhead_ms=self.overhead_s * 1000, annotations=self.annotations,
        )
