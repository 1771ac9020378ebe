"""Sensitive topics that raise a request's data class without marking any span.

Health data is the case DESIGN.md names ("HR, health and personnel data to on-prem"): a diagnosis
is not a pattern like an e-mail address, and replacing it would leave the model nothing to answer
about, so it is not pseudonymised: it only moves the request to a class whose backends may see it.
A topic needs at least two distinct cues, because single words ("patient", "therapy") are common
outside medicine. The issue's deployment table also names board, M&A, investor and legal material
(``board``: opt in with ``raise_on_topics: {board: confidential}``).

Cues are matched on each text as sent and on its skeleton (``normalise.skeleton``: escapes decoded,
invisible characters gone, Cyrillic / Greek look-alike letters made Latin), so a tenant cannot keep
its request in a lower class by writing "bоard" with a Cyrillic "о" or "diagno\u00adsis"; a topic
only ever raises the class, so matching more text can only make routing stricter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kvfence.gateway.protection.detect.normalise import skeleton

__all__ = ["TOPICS", "detect_topics"]

TOPICS: dict[str, re.Pattern[str]] = {
    "health": re.compile(
        r"\b(?:diagnos(?:ed|is|es)|prescri(?:bed|ption)|medication|dosage|symptoms?|chemotherapy|oncolog\w*"
        r"|icd-?10|medical (?:record|history|condition|leave)|patient|clinic(?:al)?|hospitali[sz]ed|surgery"
        r"|blood (?:test|pressure|sugar)|lab results|mental health|psychiatr\w*|depression|anxiety disorder"
        r"|diabetes|cancer|hiv|pregnan\w*|allerg(?:y|ic)|sick (?:leave|note)|therapist|mg/dl|mri scan)\b"),
    "hr": re.compile(
        r"\b(?:performance review|disciplinary|termination|dismissal|salary|payroll|severance|grievance"
        r"|background check|sick leave|parental leave|layoffs?|redundanc(?:y|ies)|personnel file"
        r"|employee id|probation period|harassment complaint)\b"),
    "board": re.compile(
        r"\b(?:board (?:meeting|minutes|resolution|of directors|deck)|m&a|merger|acquisition (?:of|target|talks|deal)|takeover"
        r"|due diligence|term sheet|letter of intent|tender offer|investor (?:update|relations|letter)"
        r"|material non-public|insider (?:information|trading)|attorney-client|privileged (?:and|&) confidential"
        r"|legal hold|shareholder agreement|cap table)\b"),
}


def detect_topics(texts: Iterable[str], min_cues: int = 2) -> set[str]:
    """Topics with at least ``min_cues`` distinct cue words across ``texts``."""
    found: set[str] = set()
    lowered = []
    for text in texts:
        lowered.append(text.lower())
        folded = skeleton(text)
        if folded != text:
            lowered.append(folded.lower())
    for topic, pattern in TOPICS.items():
        cues: set[str] = set()
        for text in lowered:
            cues.update(match.group(0) for match in pattern.finditer(text))
            if len(cues) >= min_cues:
                found.add(topic)
                break
    return found
