"""The interface between the gateway and its request hooks (data protection, leak detection ...).

Per request the gateway:

1. authenticates the tenant and builds a :class:`RequestContext` with the tenant's default class
   (raised, never lowered, by an ``X-Data-Class`` header);
2. runs every :class:`RequestHook` in order: ``on_request`` may rewrite the body (pseudonymise),
   raise ``ctx.data_class`` with :meth:`RequestContext.raise_class`, or refuse the request by raising
   a :class:`~kvfence.gateway.errors.GatewayError` (``RequestBlocked`` -> 400, ``DetectorFailure`` ->
   503: fail closed, the body is never forwarded unscanned);
3. routes by the final class (so a raised class can change the backend), caps the length, forwards;
4. passes every text delta of every choice (chat ``content``, ``refusal``, ``reasoning_content`` /
   ``reasoning``, ``audio.transcript``, each tool call's ``function.arguments`` or custom
   ``custom.input``; completions ``text``), streamed or not, through each hook's
   :class:`ResponseFilter` in *reverse* hook order, like middleware: the last hook saw the body as
   it left, so it sees the answer first as it arrives (e.g. leak check before placeholders are
   restored). ``response_filter`` is called once per choice and text slot; ``finish`` flushes it
   at the end of that choice. ``feed`` or ``finish`` may raise
   :class:`~kvfence.gateway.errors.LeakSuspected`: a stream then ends with an error event, a
   non-streamed answer becomes a 502 naming the incident; any other GatewayError (e.g.
   ``DetectorFailure``) ends the answer the same way with its own status. A filter may offer
   optional capabilities, called before its first ``feed``: ``restore_into_json_string()`` (its slot
   is a JSON string's text: tool-call arguments), ``restore_into_content()`` (its slot is the answer's
   content, a JSON document when the request's ``response_format`` asked for one), and
   ``token_restorer()`` for per-token fields (``logprobs``).

Hooks are built by ``kvfence.gateway.protection.build_hooks(policy, incidents=..., registry=...)``
when that module exists, and by any ``module:factory`` listed in the policy's ``gateway.hooks``
(same signature, see :class:`HookFactory`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kvfence.gateway.errors import GatewayRequestError
from kvfence.gateway.policy.schema import BackendConfig, Policy
from kvfence.gateway.policy.tenants import GatewayTenant

__all__ = [
    "HookFactory",
    "IncidentRecorder",
    "PassThroughFilter",
    "RequestContext",
    "RequestHook",
    "ResponseFilter",
    "new_incident_id",
]


def new_incident_id() -> str:
    """A fresh, unguessable incident id (``inc_`` + 24 hex digits)."""
    return "inc_" + uuid.uuid4().hex[:24]


@runtime_checkable
class IncidentRecorder(Protocol):
    """Writes incidents to the gateway's audit log (SQLite or PostgreSQL). Never pass prompt text."""

    def record_incident(
        self,
        *,
        kind: str,
        request_id: str,
        tenants: Sequence[str],
        details: Mapping[str, Any],
        incident_id: str | None = None,
    ) -> str:
        """Store an incident (queued, non-blocking) and return its id."""
        ...


@dataclass
class RequestContext:
    """What a hook knows about the request it is looking at."""

    request_id: str
    tenant: GatewayTenant          # org, workspace, key name, default data class, limits
    data_class: str                # current class; hooks may only RAISE it (see raise_class)
    backend: BackendConfig | None  # chosen after the hooks ran
    endpoint: str                  # "chat" | "completions"
    annotations: dict[str, Any] = field(default_factory=dict)  # free-form: findings summary, incident ids
    class_order: tuple[str, ...] = ()  # policy order, least sensitive first
    incidents: IncidentRecorder | None = None
    policy: Policy | None = None
    model: str = ""
    stream: bool = False
    initial_class: str = ""

    def __post_init__(self) -> None:
        if not self.initial_class:
            self.initial_class = self.data_class

    def class_rank(self, name: str) -> int:
        try:
            return self.class_order.index(name)
        except ValueError:
            raise GatewayRequestError(f"unknown data class {name!r}; the policy defines: "
                                      f"{', '.join(self.class_order)}", param="X-Data-Class") from None

    def raise_class(self, name: str, *, reason: str | None = None) -> bool:
        """Raise the request's class to ``name`` if that is more sensitive; never lowers it.

        Returns whether the class changed. ``reason`` is kept in ``annotations["class_raised_by"]``
        (for the audit log: say which detector, never the matched text).
        """
        if self.class_rank(name) <= self.class_rank(self.data_class):
            return False
        self.data_class = name
        if reason:
            self.annotations.setdefault("class_raised_by", []).append(reason)
        return True


class ResponseFilter(Protocol):
    """Filters one choice's text as it is produced."""

    def feed(self, text_delta: str) -> str:
        """Return the text that is safe to emit now (e.g. with placeholders restored)."""
        ...

    def finish(self) -> str:
        """Flush what was held back at the end of the choice."""
        ...


class RequestHook(Protocol):
    """Runs before routing on every request, and filters every answer."""

    async def on_request(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        """Return the (possibly rewritten) body; may raise the class or a GatewayError."""
        ...

    def response_filter(self, ctx: RequestContext) -> ResponseFilter:
        """A fresh filter for one choice of this request's answer."""
        ...


class HookFactory(Protocol):
    """Signature of ``build_hooks``; optional ``aclose()`` on a hook is awaited at shutdown."""

    def __call__(self, policy: Policy, *, incidents: IncidentRecorder, registry: Any) -> list[RequestHook]: ...


class PassThroughFilter:
    """A filter that changes nothing (for hooks that only inspect requests)."""

    def feed(self, text_delta: str) -> str:
        return text_delta

    def finish(self) -> str:
        return ""
