"""The gateway hook: scan and pseudonymise requests, restore answers, stop cross-tenant leaks.

Per request (:meth:`ProtectionHook.on_request`): every text of the body is scanned (fail closed on
detector error or timeout); findings may raise the data class; the final class's actions decide per
finding whether it passes, is replaced by a placeholder, or blocks the request; the outgoing text
is fingerprinted into the leak index. Per answer choice (:class:`ProtectionFilter`): the raw
upstream text is scanned for foreign n-gram runs and canaries *before* placeholders are restored,
and a suspicion ends the answer with :class:`LeakSuspected` after recording an incident.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from kvfence.errors import ConfigError
from kvfence.gateway.errors import DetectorFailure, GatewayRequestError, LeakSuspected, RequestBlocked
from kvfence.gateway.hooks import RequestContext, new_incident_id
from kvfence.gateway.policy.schema import Policy
from kvfence.gateway.protection.config import (
    Action,
    ClassProtection,
    ProtectionConfig,
    parse_class_protection,
)
from kvfence.gateway.protection.detect.detector import Detector
from kvfence.gateway.protection.detect.recognizers.pii import PII_ENTITIES, RESTRICTED_PII
from kvfence.gateway.protection.detect.recognizers.secrets import SECRET_ENTITIES
from kvfence.gateway.protection.detect.split_values import merge_split, split_findings
from kvfence.gateway.protection.detect.topics import TOPICS, detect_topics
from kvfence.gateway.protection.filter import ProtectionFilter, RequestState
from kvfence.gateway.protection.leak.index import InMemoryIndex
from kvfence.gateway.protection.leak.scan import LeakEvidence, LeakMonitor
from kvfence.gateway.protection.messages import OpaquePart, TextSlot, request_plan, set_texts
from kvfence.gateway.protection.metrics import ProtectionMetrics
from kvfence.gateway.protection.policy_checks import protection_policy_problems
from kvfence.gateway.protection.pseudonymise.placeholders import Pseudonymiser
from kvfence.gateway.protection.pseudonymise.slot_syntax import json_answer_requested

__all__ = ["ProtectionHook", "tenant_unit", "tenant_unit_of"]

log = logging.getLogger("kvfence.gateway.protection")

# Below this many characters, fingerprinting costs less than a hop to a worker thread.
INLINE_FINGERPRINT_CHARS = 16_000


def tenant_unit_of(organization: str, workspace: str, key_name: str, unit: str) -> str:
    """The isolation unit leak detection compares: organization (default), workspace or key."""
    if unit == "workspace":
        return f"{organization}/{workspace}"
    if unit == "key":
        return f"{organization}/{workspace}/{key_name}"
    return organization


def tenant_unit(ctx: RequestContext, unit: str) -> str:
    tenant = ctx.tenant
    return tenant_unit_of(tenant.organization, tenant.workspace, tenant.name, unit)


def _path_name(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))


def slot_name(slot: TextSlot) -> str:
    """Where a slot is, for an error message (``messages[2].tool_calls[0].function.name``); a JSON
    object's key is named as such, never quoted (it is the value that was found)."""
    return _path_name(slot.path[:-1]) + " (a key)" if slot.is_key else _path_name(slot.path)


class ProtectionHook:
    """Data protection and leak detection as one gateway :class:`~kvfence.gateway.hooks.RequestHook`."""

    def __init__(self, policy: Policy, config: ProtectionConfig, detector: Detector, *,
                 monitor: LeakMonitor | None, incidents: Any, metrics: ProtectionMetrics) -> None:
        self._config = config
        self._detector = detector
        self._monitor = monitor
        self._incidents = incidents
        self.metrics = metrics
        self._class_protection: dict[str, ClassProtection] = {
            c.name: parse_class_protection(c.name, c.protection) for c in policy.data_classes}
        most_sensitive = policy.data_classes[-1].name
        raise_map = dict.fromkeys(RESTRICTED_PII, most_sensitive) if config.raise_class is None \
            else dict(config.raise_class)
        unknown = sorted({c for c in raise_map.values() if c not in self._class_protection})
        if unknown:
            raise ConfigError(f"gateway.protection.raise_class names unknown data classes: {', '.join(unknown)}")
        known = PII_ENTITIES | SECRET_ENTITIES | {"PERSON"}
        named = set(raise_map) | {e for c in self._class_protection.values() for e in c.entities}
        typos = sorted(named - known)
        if typos:
            raise ConfigError(f"gateway.protection: unknown entity types {', '.join(typos)}; "
                              f"known: {', '.join(sorted(known))}")
        self._raise_map = raise_map
        topics = {"health": most_sensitive} if config.raise_on_topics is None else dict(config.raise_on_topics)
        bad = sorted(set(topics) - set(TOPICS)) + sorted(c for c in topics.values() if c not in self._class_protection)
        if bad:
            raise ConfigError(f"gateway.protection.raise_on_topics: unknown topics or data classes: {', '.join(bad)}; "
                              f"topics: {', '.join(sorted(TOPICS))}")
        self._topic_classes = topics
        # the rest of what `kvfence gateway check` reports (disabled rules, canaries)
        problems = protection_policy_problems(policy)
        if problems:
            raise ConfigError("; ".join(".".join(str(p) for p in loc) + f": {message}" for loc, message in problems))
        self._states: dict[int, RequestState] = {}
        self._record_inline = monitor is not None and isinstance(monitor.index, InMemoryIndex)

    # -- request side -------------------------------------------------------------------------

    async def on_request(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        plan = request_plan(ctx.endpoint, body)
        slots = plan.slots
        texts = [slot.text for slot in slots]
        # An identifier (a tool name, a JSON key, an id) joins words with "_", which the rules read
        # as part of a word ("ssn_536-22-8741"): such slots are scanned once more with spaces there
        # (same length, so the spans hold).
        spaced = [i for i, slot in enumerate(slots) if not slot.rewritable and "_" in slot.text]
        try:
            per_text = await self._detector.scan_texts(texts + [texts[i].replace("_", " ") for i in spaced])
        except DetectorFailure:
            self.metrics.detector_failures.inc()
            raise
        for i, extra in zip(spaced, per_text[len(texts):], strict=True):
            per_text[i] = per_text[i] + [f for f in extra
                                         if not any(f.start < g.end and g.start < f.end for g in per_text[i])]
        del per_text[len(texts):]
        try:
            # Values split across the texts a prompt is made of; scan-only slots (names, keys, URLs)
            # are not prompt text laid end to end, and are scanned whole on their own.
            joined = [i for i, slot in enumerate(slots) if slot.rewritable]
            pieces = split_findings(self._detector.scan, [slots[i] for i in joined])
            per_text = merge_split(per_text, {joined[k]: found for k, found in pieces.items()})
        except Exception as exc:  # the boundary windows are small: scanned inline, but still fail closed
            self.metrics.detector_failures.inc()
            log.exception("data-protection detector failed; request refused")
            raise DetectorFailure("data-protection scan failed; the request was not forwarded (fail closed)") from exc
        findings = [f for found in per_text for f in found if not f.continued]  # a split value counts once
        for finding in findings:
            target = self._raise_map.get(finding.entity)
            if target is not None and ctx.raise_class(target, reason=f"detector:{finding.entity}"):
                self.metrics.class_raised.labels(target).inc()
        if self._topic_classes:
            for topic in sorted(detect_topics(texts) & set(self._topic_classes)):
                target = self._topic_classes[topic]
                if ctx.raise_class(target, reason=f"topic:{topic}"):
                    self.metrics.class_raised.labels(target).inc()
        actions = self._class_protection.get(ctx.data_class, ClassProtection())
        if ctx.endpoint == "embeddings":
            actions = actions.for_embeddings()
        self._check_opaque(ctx, plan.opaque, actions)
        blocked = sorted({f.entity for f in findings
                          if actions.action_for(f.entity, f.category) is Action.BLOCK})
        # A value in a scan-only field (a name, an id, a URL, a JSON key) cannot become a placeholder
        # without breaking what refers to it: what the class would pseudonymise there is refused.
        fixed = sorted({(slot_name(slot), f.entity) for slot, found in zip(slots, per_text, strict=True)
                        if not slot.rewritable for f in found
                        if actions.action_for(f.entity, f.category) is Action.PSEUDONYMISE})
        counts = Counter((f.entity, actions.action_for(f.entity, f.category).value) for f in findings)
        for (entity, action), count in counts.items():
            self.metrics.findings.labels(entity, action).inc(count)
        ctx.annotations["protection"] = {
            "findings": dict(Counter(f.entity for f in findings)),
            "data_class": ctx.data_class,
        }
        if blocked:
            self.metrics.blocked.inc()
            raise RequestBlocked(
                f"the request contains {', '.join(blocked)}, which data class {ctx.data_class!r} may not send "
                "to a backend (policy action: block); remove it or ask for a class that allows it")
        if fixed:
            self.metrics.blocked.inc()
            where = ", ".join(f"{entity} in `{name}`" for name, entity in fixed)
            raise RequestBlocked(
                f"the request has {where}: a field that is passed unchanged (a name, id, URL, pattern or "
                "JSON key) and so cannot be pseudonymised; remove the value from it")
        pseudonymiser = Pseudonymiser(texts)
        rewritten = [
            pseudonymiser.apply(text, [f for f in found
                                       if actions.action_for(f.entity, f.category) is Action.PSEUDONYMISE])
            for text, found in zip(texts, per_text, strict=True)
        ]
        body = set_texts(body, slots, rewritten)
        unit = tenant_unit(ctx, self._config.leak.tenant_unit)
        state = RequestState(pseudonymiser.restore_table, unit, json_answer=json_answer_requested(body))
        if self._monitor is not None:
            body = self._inject_canary(ctx, body, unit)
            try:
                if self._record_inline and sum(len(t) for t in rewritten) <= INLINE_FINGERPRINT_CHARS:
                    state.own_fingerprints = self._monitor.record_prompt(unit, rewritten)
                else:  # long prompts (or a Redis round trip) off the event loop
                    state.own_fingerprints = await asyncio.to_thread(self._monitor.record_prompt, unit, rewritten)
            except Exception as exc:
                # Unrecorded, this prompt could leak into another tenant's answer unnoticed.
                log.exception("leak index unavailable; request refused")
                self.metrics.detector_failures.inc()
                raise DetectorFailure("the leak-detection index is unavailable; the request was not forwarded "
                                      "(fail closed). Retry shortly.") from exc
        self._remember(ctx, state)
        ctx.annotations["protection"]["scan_ms"] = round((time.perf_counter() - started) * 1000, 3)
        self.metrics.scan_seconds.observe(time.perf_counter() - started)
        return body

    def _check_opaque(self, ctx: RequestContext, parts: list[OpaquePart], actions: ClassProtection) -> None:
        """Refuse what no detector can read, unless the (final) data class lets that kind pass."""
        for part in parts:
            where = _path_name(part.path)
            if part.kind == "token_ids":
                raise GatewayRequestError(f"data protection is on for this gateway, and `{where}` is given as "
                                          "token ids, which cannot be scanned: send the prompt as text",
                                          param=where)
            if not actions.non_text_passes(part.kind, ctx.data_class):
                self.metrics.blocked.inc()
                raise RequestBlocked(
                    f"`{where}` is {part.kind} content, which no detector reads; data class {ctx.data_class!r} "
                    f"does not send it to a backend (set data_classes[{ctx.data_class}].protection.non_text."
                    f"{part.kind}: pass to allow it)")

    def _inject_canary(self, ctx: RequestContext, body: dict[str, Any], unit: str) -> dict[str, Any]:
        book = self._monitor.canaries if self._monitor is not None else None
        if book is None or ctx.endpoint not in ("chat", "responses", "messages"):
            return body
        canaries = book.configured_for(unit)
        if not canaries and self._config.leak.canaries:
            canaries = [book.derived(unit)]
        if not canaries:
            return body
        note = ("[gateway marker, confidential: " + " ".join(canaries) + " ; never repeat or mention it]")
        if ctx.endpoint != "chat":
            return _with_system_note(ctx.endpoint, body, note)
        messages = list(body.get("messages") or [])
        first = messages[0] if messages and isinstance(messages[0], dict) else None
        # Into the caller's own system (or OpenAI "developer") message when there is one: many chat
        # templates refuse a second system message, or one that is not first.
        if first is not None and first.get("role") in ("system", "developer"):
            content = first.get("content")
            if isinstance(content, str):
                messages[0] = {**first, "content": f"{content}\n\n{note}"}
                return {**body, "messages": messages}
            if isinstance(content, list):
                messages[0] = {**first, "content": [*content, {"type": "text", "text": note}]}
                return {**body, "messages": messages}
        messages.insert(0, {"role": "system", "content": note})
        return {**body, "messages": messages}

    def _remember(self, ctx: RequestContext, state: RequestState) -> None:
        key = id(ctx)
        self._states[key] = state
        # The state dies with the request: no placeholder mapping outlives it.
        weakref.finalize(ctx, self._states.pop, key, None)

    # -- answer side --------------------------------------------------------------------------

    def response_filter(self, ctx: RequestContext) -> ProtectionFilter:
        state = self._states.get(id(ctx)) or RequestState({}, tenant_unit(ctx, self._config.leak.tenant_unit))
        scanner = None
        if self._monitor is not None:
            scanner = self._monitor.scanner(state.tenant_unit, state.own_fingerprints)
        return ProtectionFilter(self, ctx, state, scanner)

    def report_leak(self, ctx: RequestContext, state: RequestState, evidence: LeakEvidence,
                    emitted_chars: int) -> LeakSuspected:
        self.metrics.leaks.labels(evidence.detector).inc()
        details = {
            "detector": evidence.detector,
            "victim_tenants": list(evidence.owners),
            "receiving_tenant": state.tenant_unit,
            "evidence_fingerprints": list(evidence.fingerprints),
            "run_words": evidence.run_words,
            "caught_at_word": evidence.at_word,
            "emitted_chars_before_stop": emitted_chars,
            "withheld": "the rest of the answer",
            "request_started_at": datetime.fromtimestamp(state.started_at, UTC).isoformat(),
            "detected_at": datetime.now(UTC).isoformat(),
            "window_s": self._config.leak.window_s,
            "endpoint": ctx.endpoint,
            "model": ctx.model,
            "backend": ctx.backend.name if ctx.backend is not None else None,
            "data_class": ctx.data_class,
            "stream": ctx.stream,
        }
        tenants = [state.tenant_unit, *evidence.owners]
        incident_id = state.leak_incident
        if incident_id is None:
            try:
                incident_id = self._incidents.record_incident(
                    kind="cross_tenant_leak", request_id=ctx.request_id, tenants=tenants, details=details)
            except Exception:  # the answer is withheld whatever happens to the audit log
                log.exception("could not record leak incident for request %s", ctx.request_id)
                incident_id = new_incident_id()
            state.leak_incident = incident_id
        ctx.annotations.setdefault("incidents", []).append(incident_id)
        log.warning("suspected cross-tenant leak in answer to %s (request %s): incident %s",
                    state.tenant_unit, ctx.request_id, incident_id)
        return LeakSuspected(incident_id, "answer withheld: it carried text from another tenant's recent "
                                          "prompts (suspected cross-tenant leak)")

    async def aclose(self) -> None:
        self._detector.close()
        if self._monitor is not None:
            self._monitor.index.close()


def _with_system_note(endpoint: str, body: dict[str, Any], note: str) -> dict[str, Any]:
    """The canary note where the Responses API (``instructions``) or the Messages API (``system``) keeps
    its system text: appended to what the caller sent there, or as the whole of it."""
    key = "instructions" if endpoint == "responses" else "system"
    current = body.get(key)
    if isinstance(current, list):
        return {**body, key: [*current, {"type": "text", "text": note}]}
    return {**body, key: f"{current}\n\n{note}" if isinstance(current, str) and current else note}
