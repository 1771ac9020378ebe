"""Verdicts and check results: the data every check returns and every report renders.

A verdict is what a CI job needs: ``pass`` (exit 0), ``finding`` (exit 1), or a reason the audit
could not decide (``inconclusive`` / ``error``, exit 2). "Could not decide" is never reported as
"safe".
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["CheckResult", "Evidence", "Severity", "Verdict", "combined_exit_code", "load_results"]


class Verdict(enum.StrEnum):
    """Outcome of one check."""

    PASS = "pass"
    FINDING = "finding"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"

    @property
    def exit_code(self) -> int:
        if self is Verdict.PASS:
            return 0
        if self is Verdict.FINDING:
            return 1
        return 2


class Severity(enum.StrEnum):
    """How bad a finding is, for a reader who is not a specialist.

    ``critical``: another tenant's data came back (the incident); ``high``: a defect that lets it
    happen or be measured (cross-tenant cache, a prompt silently cut); ``medium``: a side channel or
    a known advisory that needs a specific setup; ``low``: hygiene.
    """

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


@dataclass(slots=True)
class Evidence:
    """One observation that supports a finding: what was sent, what came back, why it matters.

    ``impact`` is one sentence for a non-expert: what an attacker or a victim would experience.
    """

    title: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)
    severity: Severity = Severity.HIGH
    impact: str = ""


@dataclass(slots=True)
class CheckResult:
    """The outcome of one check against one endpoint, serialisable to JSON."""

    check: str
    verdict: Verdict
    summary: str
    endpoint: str
    model: str | None = None
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    duration_s: float = 0.0
    parameters: dict[str, Any] = field(default_factory=dict)
    measurements: dict[str, Any] = field(default_factory=dict)
    evidence: list[Evidence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckResult:
        evidence = [Evidence(**{**item, "severity": Severity(item.get("severity", "high"))})
                    for item in data.get("evidence", [])]
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "evidence"}
        fields["verdict"] = Verdict(fields["verdict"])
        return cls(**fields, evidence=evidence)

    def save(self, out_dir: Path) -> Path:
        """Write ``<check>.json`` into ``out_dir`` (replacing an earlier run of the same check)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{self.check}.json"
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n", encoding="utf-8")
        return path


# The order in which checks appear in reports and in `kvfence audit all`.
CHECK_ORDER = ("engine", "admission", "leak", "cache-sharing", "eviction")


def load_results(out_dir: Path) -> list[CheckResult]:
    """Every check result saved in ``out_dir``, in report order; unreadable files are skipped."""
    results: list[CheckResult] = []
    for name in CHECK_ORDER:
        path = out_dir / f"{name}.json"
        if not path.is_file():
            continue
        try:
            results.append(CheckResult.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (ValueError, KeyError, TypeError):
            continue
    return results


def combined_exit_code(verdicts: list[Verdict]) -> int:
    """A finding anywhere wins (1); otherwise anything undecided (2); otherwise 0."""
    if any(v is Verdict.FINDING for v in verdicts):
        return 1
    if any(v.exit_code == 2 for v in verdicts):
        return 2
    return 0
