"""Drafting the notice a team sends its own customers after a suspected cross-tenant leak.

Pure text from an incident row of the audit log (which holds fingerprints and tenant names, never
prompt text). The draft states what is known and leaves the judgement calls to the team, marked
``[TO CONFIRM]``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["draft_notice", "incident_summary"]


def _when(ts: Any) -> str:
    if isinstance(ts, int | float):
        return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(ts or "unknown")


def incident_summary(incident: dict[str, Any]) -> str:
    """One line for ``kvfence gateway incidents list``."""
    details = incident.get("details") or {}
    tenants = ", ".join(incident.get("tenants") or [])
    return (f"{incident.get('id')}  {_when(incident.get('ts'))}  {incident.get('kind')}  "
            f"detector={details.get('detector', '?')}  tenants={tenants}  request={incident.get('request_id')}")


def draft_notice(incident: dict[str, Any], *, next_update_hours: int = 24) -> str:
    """A plain-text customer notice for one incident."""
    details = incident.get("details") or {}
    receiving = details.get("receiving_tenant") or (incident.get("tenants") or ["?"])[0]
    victims = details.get("victim_tenants") or (incident.get("tenants") or [])[1:]
    window_s = float(details.get("window_s") or 900)
    detected = _when(incident.get("ts"))
    started = details.get("request_started_at", "unknown")
    window_start = "unknown"
    if isinstance(incident.get("ts"), int | float):
        window_start = _when(float(incident["ts"]) - window_s)
    next_update = "unknown"
    if isinstance(incident.get("ts"), int | float):
        next_update = (datetime.fromtimestamp(float(incident["ts"]), UTC)
                       + timedelta(hours=next_update_hours)).strftime("%Y-%m-%d %H:%M UTC")
    if details.get("detector") == "canary":
        how = "a confidential marker that belongs only to another customer's requests appeared in an answer"
    else:
        how = (f"an answer contained a run of {details.get('run_words', '?')} consecutive words matching text "
               "that another customer had sent in the previous minutes, and not text the receiving customer sent")
    lines = [
        f"Subject: Security notice - possible exposure of request data (incident {incident.get('id')})",
        "",
        "What happened",
        f"  On {detected} our gateway stopped an answer from the model service ({details.get('backend') or 'backend'}, "
        f"model {details.get('model') or '?'}) because {how}. We treat this as a suspected cross-customer "
        "data exposure until our investigation concludes otherwise.",
        "",
        "Who is involved",
        f"  Customer whose data may have been exposed: {', '.join(victims) or 'unknown'}",
        f"  Customer whose request received the answer: {receiving}",
        f"  Request: {incident.get('request_id')} (started {started})",
        "",
        "Time window",
        f"  Text compared against was sent between {window_start} and {detected} "
        f"(the gateway keeps fingerprints of the last {window_s / 60:g} minutes, never the text itself).",
        "",
        "What was withheld",
        f"  The gateway withheld {details.get('withheld', 'the rest of the answer')}; "
        f"{details.get('emitted_chars_before_stop', 0)} characters had already been delivered before the stop "
        f"(streamed: {'yes' if details.get('stream') else 'no'}). [TO CONFIRM: whether that delivered part "
        "contained your data]",
        "",
        "What we changed",
        "  [TO CONFIRM: e.g. backend taken out of rotation, its prompt cache flushed, requests of the affected "
        "data classes routed to dedicated capacity, engine upgraded]",
        "",
        "Next update",
        f"  We will send the next update by {next_update}, or sooner if we learn more.",
        "",
        f"Evidence kept: {len(details.get('evidence_fingerprints') or [])} keyed fingerprints (no text).",
    ]
    return "\n".join(lines) + "\n"
