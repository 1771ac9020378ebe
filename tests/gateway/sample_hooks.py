"""Small hooks that exercise the gateway's hook plumbing (loaded via the policy's ``gateway.hooks``).

- a word ``MERGER`` raises the class to ``confidential``; ``BLOCKME`` blocks; ``CRASHME`` makes the
  hook itself fail (the gateway must fail closed);
- ``alice@example.com`` is replaced by ``<EMAIL_1>`` before forwarding and restored in the answer,
  even when the placeholder arrives split across stream chunks;
- an answer containing ``LEAKED-SECRET`` is withheld as a suspected leak, with an incident.
"""

from __future__ import annotations

from typing import Any

from kvfence.gateway.errors import DetectorFailure, LeakSuspected, RequestBlocked
from kvfence.gateway.hooks import RequestContext

EMAIL = "alice@example.com"
PLACEHOLDER = "<EMAIL_1>"


def _texts(body: dict[str, Any]) -> list[str]:
    if "messages" in body:
        return [m["content"] for m in body["messages"] if isinstance(m.get("content"), str)]
    return [body["prompt"]] if isinstance(body.get("prompt"), str) else []


class KeywordHook:
    async def on_request(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        text = " ".join(_texts(body))
        if "CRASHME" in text:
            raise RuntimeError("detector crashed")
        if "BLOCKME" in text:
            raise RequestBlocked("blocked by the test policy")
        if "MERGER" in text:
            ctx.raise_class("confidential", reason="keyword:merger")
        ctx.annotations["keyword_hook"] = "ran"
        return body

    def response_filter(self, ctx: RequestContext) -> Any:
        return _LeakFilter(ctx)


class _LeakFilter:
    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.seen = ""

    def feed(self, text: str) -> str:
        self.seen += text
        if "CHECKFAIL" in self.seen:
            raise DetectorFailure("the leak index is unreachable: the answer cannot be checked")
        if "FILTERBUG" in self.seen:
            raise RuntimeError("a bug in a filter")
        if "LEAKED-SECRET" in self.seen:
            assert self.ctx.incidents is not None
            incident = self.ctx.incidents.record_incident(
                kind="test_leak", request_id=self.ctx.request_id, tenants=[self.ctx.tenant.name],
                details={"marker": "sha:test"})
            raise LeakSuspected(incident, "answer withheld: it carries another tenant's data")
        return text

    def finish(self) -> str:
        return ""


class PlaceholderHook:
    async def on_request(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        body = dict(body)
        if "messages" in body:
            body["messages"] = [
                {**m, "content": m["content"].replace(EMAIL, PLACEHOLDER)} if isinstance(m.get("content"), str)
                else m for m in body["messages"]]
        elif isinstance(body.get("prompt"), str):
            body["prompt"] = body["prompt"].replace(EMAIL, PLACEHOLDER)
        return body

    def response_filter(self, ctx: RequestContext) -> Any:
        return _RestoreFilter()


class _RestoreFilter:
    """Holds back a possible placeholder prefix until it is complete."""

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, text: str) -> str:
        self.pending += text
        out = self.pending.replace(PLACEHOLDER, EMAIL)
        keep = 0
        for n in range(min(len(PLACEHOLDER) - 1, len(out)), 0, -1):
            if PLACEHOLDER.startswith(out[-n:]):
                keep = n
                break
        self.pending = out[len(out) - keep:] if keep else ""
        return out[:len(out) - keep]

    def finish(self) -> str:
        out, self.pending = self.pending, ""
        return out


def build(policy: Any, *, incidents: Any, registry: Any) -> list[Any]:
    # Order matters (onion): the placeholder hook's filter restores after the leak filter has looked.
    return [PlaceholderHook(), KeywordHook()]
