"""``kvfence audit questionnaire``: the questions to ask a provider, pre-filled from measurements.

The questions are the ones the incident write-ups (DESIGN.md) say a customer should ask. Where a
saved check result answers part of a question, the measured answer is written next to it;
everything else is left for the provider to answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kvfence.audit.verdict import CheckResult

__all__ = ["QUESTIONS", "Question", "render_questionnaire"]

_Filler = Callable[[dict[str, CheckResult]], str | None]


@dataclass(frozen=True, slots=True)
class Question:
    topic: str
    question: str
    why: str
    measured: _Filler


def _cache_scope(results: dict[str, CheckResult]) -> str | None:
    r = results.get("cache-sharing")
    engine = results.get("engine")
    declared = engine.measurements.get("declared_cache_scope") if engine else None
    claim = f"The endpoint declares cache scope '{declared}'. " if declared else ""
    if r is None:
        return claim.strip() or None
    levels = r.measurements.get("levels", {})
    parts = []
    for name, data in levels.items():
        if data.get("measured"):
            p = data["stats"]["p_value"]
            state = {True: "shares a cache", False: "no sharing detected"}.get(data["shares_cache"],
                                                                                 "undecided (too few samples)")
            parts.append(f"{name}: {state} (p={p:.3g})")
        else:
            parts.append(f"{name}: not measured")
    return claim + f"Measured {r.verdict.value}: {r.summary}. Per level: " + "; ".join(parts) + "."


def _gateway(results: dict[str, CheckResult]) -> str | None:
    r = results.get("cache-sharing")
    if r is None:
        return None
    cross = r.measurements.get("levels", {}).get("cross-org", {})
    if not cross.get("measured"):
        return "cross-organisation sharing was not measured (no --key-b)."
    if cross.get("shares_cache") is None:
        return "cross-organisation sharing was measured but not decided (too few samples or time)."
    if cross.get("shares_cache"):
        return ("two different organisations' keys shared a prompt cache: either the provider shares caches "
                "globally or a gateway in front of it merges customers into one account.")
    return "no cache sharing between the two organisations' keys was detected through this endpoint."


def _engine(results: dict[str, CheckResult]) -> str | None:
    r = results.get("engine")
    if r is None:
        return None
    m = r.measurements
    advisories = ", ".join(f"{a['id']} ({a['state']})" for a in m.get("advisories", [])) or "none"
    name = m.get("engine") or "not identifiable from outside"
    return f"engine {name}, version {m.get('version') or 'not exposed'}; matching advisories: {advisories}."


def _context(results: dict[str, CheckResult]) -> str | None:
    r = results.get("admission")
    if r is None:
        return None
    m = r.measurements
    capacity = m.get("kv_capacity")
    text = (f"advertised context {m.get('max_context')} ({m.get('max_context_source')}); KV capacity "
            f"{capacity if capacity else 'not exposed'}. Admission check: {r.verdict.value}: {r.summary}.")
    if capacity and m.get("max_context") and capacity < m["max_context"]:
        text += " The advertised context is LARGER than the KV capacity."
    return text


def _pages(results: dict[str, CheckResult]) -> str | None:
    found = [results[c] for c in ("leak", "admission") if c in results]
    if not found:
        return None
    return " ".join(f"{r.check} check: {r.verdict.value}: {r.summary}." for r in found) + (
        " (A black-box test can show a leak; it cannot prove page ownership tracking.)")


def _leak_detection(results: dict[str, CheckResult]) -> str | None:
    r = results.get("leak")
    return None if r is None else f"our own canary test: {r.verdict.value}: {r.summary}."


def _none(results: dict[str, CheckResult]) -> str | None:
    return None


QUESTIONS: tuple[Question, ...] = (
    Question("Cache scope",
             "What is the scope of your prompt (prefix) cache: global, organisation, workspace, API key or "
             "single request? Is it configurable per customer, and what is the default?",
             "A cache shared across accounts leaks prompts through time to first token (Gu et al., ICML 2025).",
             _cache_scope),
    Question("Gateway preservation of isolation",
             "If requests reach you through a gateway or reseller, does it keep each end customer in a separate "
             "account or cache scope, or merge many customers into one?",
             "A gateway that merges customers undoes the provider's per-account isolation.",
             _gateway),
    Question("Engine, version and patch speed",
             "Which serving engine and version run our traffic? How fast do you deploy fixes for isolation "
             "defects (e.g. CVE-2025-46570), and how do you tell customers?",
             "Known isolation defects are version-specific; patch latency is exposure time.",
             _engine),
    Question("Context versus capacity",
             "Is the advertised maximum context at most the KV cache capacity on every node that serves it "
             "(prefill and decode)? What exactly happens to a prompt that does not fit?",
             "The 2026 incident began with a context window larger than the prefill KV pool.",
             _context),
    Question("Page ownership tracking",
             "Does the engine track which request owns each KV page, scrub pages between requests, and abort "
             "(never substitute a placeholder for) rejected requests, including across disaggregated "
             "prefill/decode handoffs?",
             "Pages are shared and not zeroed; only bookkeeping keeps one request from reading another's KV.",
             _pages),
    Question("Leak detection",
             "Do you monitor answers for another customer's data (canaries, fingerprints), and would a "
             "cross-tenant answer be withheld, or billed and returned as a success?",
             "The incident's 155 leaked answers were HTTP 200s, billed in full.",
             _leak_detection),
    Question("Disclosure policy",
             "How, and how fast, do you notify affected customers of an isolation incident? Do you publish "
             "post-mortems?",
             "Customers need to know which of their data may have gone where.",
             _none),
    Question("Retention",
             "How long are prompts, answers, KV caches and logs kept? Is the KV cache ever offloaded to CPU, "
             "disk or an external store, and is that store keyed per tenant?",
             "External KV stores keyed by tokens alone ignore tenant scoping.",
             _none),
)


def render_questionnaire(results: list[CheckResult]) -> str:
    """The questionnaire as Markdown, with measured answers where the results give one."""
    by_check = {r.check: r for r in results}
    endpoints = sorted({r.endpoint for r in results})
    lines = [
        "# Provider questionnaire: tenant isolation",
        "",
        f"Prepared {datetime.now(UTC).date().isoformat()} with `kvfence audit`"
        + (f" against {', '.join(endpoints)}" if endpoints else "") + ".",
        "Measured answers come from the audit results; the provider's answer is still needed for every question.",
        "",
    ]
    for i, q in enumerate(QUESTIONS, 1):
        measured = q.measured(by_check)
        lines += [f"## {i}. {q.topic}", "", q.question, "", f"*Why it matters:* {q.why}", "",
                  f"**Measured:** {measured}" if measured else "**Measured:** not measurable from outside / not run.",
                  "", "**Provider's answer:** _(to be filled in by the provider)_", ""]
    return "\n".join(lines)
