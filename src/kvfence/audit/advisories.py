"""Known isolation defects of serving engines, and matching a fingerprint against them (pure).

Each entry names its public source. The list is deliberately about *isolation* (one tenant's data
or timing reaching another), not every CVE of an engine.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

__all__ = ["ADVISORIES", "Advisory", "Fingerprint", "Match", "MatchState", "Severity", "match_advisories",
           "parse_version"]


class Severity(enum.StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    INFO = "info"


class MatchState(enum.StrEnum):
    AFFECTED = "affected"
    POSSIBLY_AFFECTED = "possibly affected"


@dataclass(slots=True)
class Fingerprint:
    """What the endpoint revealed about itself; ``evidence`` lists where each fact came from."""

    engine: str | None = None
    version: str | None = None
    features: set[str] = field(default_factory=set)
    evidence: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Advisory:
    """One known defect: which engine, which versions, under which deployment feature."""

    id: str
    title: str
    engine: str
    severity: Severity
    description: str
    remediation: str
    sources: tuple[str, ...]
    fixed_in: str | None = None  # first fixed version; None: every version until proven otherwise
    requires_feature: str | None = None  # e.g. "disaggregation": only deployments using it

    @property
    def affected_versions(self) -> str:
        return f"< {self.fixed_in}" if self.fixed_in else "all known versions"


@dataclass(frozen=True, slots=True)
class Match:
    advisory: Advisory
    state: MatchState
    reason: str


ADVISORIES: tuple[Advisory, ...] = (
    Advisory(
        id="CVE-2025-46570",
        title="vLLM prefix cache timing side channel across users",
        engine="vllm",
        severity=Severity.HIGH,
        description=("Automatic prefix caching shares KV blocks between every request on an engine, so a "
                     "caller can tell from time to first token whether another caller recently sent a "
                     "prompt prefix. 0.9.0 added a per-request cache_salt that separates caches."),
        remediation="Upgrade to vLLM >= 0.9.0 and have the gateway inject an unpredictable per-tenant cache_salt.",
        sources=("https://github.com/vllm-project/vllm/security/advisories/GHSA-4qjh-9fv9-r85r",
                 "https://github.com/vllm-project/vllm/pull/17045"),
        fixed_in="0.9.0",
    ),
    Advisory(
        id="KVF-SALT-CONVENTION",
        title="Cache isolation by caller-supplied cache_salt is a convention, not a wall",
        engine="vllm",
        severity=Severity.INFO,
        description=("With cache_salt, isolation holds only if every caller sends an unpredictable salt "
                     "per tenant. A request without a salt, or anyone who knows a tenant's salt, shares "
                     "that tenant's prefix cache and its timing signal."),
        remediation=("Derive the salt server-side (e.g. a gateway HMAC of the tenant identity), strip "
                     "client-sent salts, and verify with `kvfence audit cache-sharing`."),
        sources=("https://github.com/vllm-project/vllm/issues/16016",
                 "https://github.com/vllm-project/vllm/pull/39082"),
    ),
    Advisory(
        id="SGLANG-PD-ABORT",
        title="SGLang disaggregated prefill/decode: rejected prefill not aborted on the decode side",
        engine="sglang",
        severity=Severity.HIGH,
        description=("In PD-disaggregated mode an over-length request rejected on the prefill node was "
                     "swapped for a one-token placeholder and its transfer still completed, so the decode "
                     "node generated over KV pages it had not received (stale pages of earlier requests) "
                     "and answered 200."),
        remediation=("Use a release that retires rejected prefills before KV handoff, keep the advertised "
                     "context within the prefill KV pool, and run `kvfence audit admission` and `leak`."),
        sources=("https://github.com/sgl-project/sglang/issues/30233",
                 "https://github.com/sgl-project/sglang/pull/30325",
                 "https://github.com/sgl-project/sglang/pull/38704"),
        requires_feature="disaggregation",
    ),
    Advisory(
        id="NDSS25-RADIX-PROMPT-LEAK",
        title="Shared radix (prefix) cache lets a tenant reconstruct another's prompt token by token",
        engine="sglang",
        severity=Severity.MEDIUM,
        description=("A radix cache shared by all tenants answers a correctly guessed next token faster; "
                     "repeated probes rebuild another tenant's prompt (\"I Know What You Asked\", NDSS 2025)."),
        remediation="Scope prefix caching per tenant, or disable it for untrusted multi-tenant traffic.",
        sources=("https://www.ndss-symposium.org/ndss-paper/i-know-what-you-asked-prompt-leakage-via-kv-cache-"
                 "sharing-in-multi-tenant-llm-serving/",),
    ),
)

_VERSION = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)")


def parse_version(text: str) -> tuple[int, int, int, int] | None:
    """``"0.8.5.post1"`` -> ``(0, 8, 5, 1)``; the last field orders pre-release (0) < final (1)."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    major, minor, patch, rest = match.groups()
    is_pre = bool(re.match(r"[.\-+]?(rc|a|b|alpha|beta|dev|pre)", rest or "", re.IGNORECASE))
    return int(major), int(minor or 0), int(patch or 0), 0 if is_pre else 1


def match_advisories(fingerprint: Fingerprint, advisories: tuple[Advisory, ...] = ADVISORIES) -> list[Match]:
    """The advisories that apply to the fingerprint, each with why."""
    if fingerprint.engine is None:
        return []
    found: list[Match] = []
    version = parse_version(fingerprint.version) if fingerprint.version else None
    for advisory in advisories:
        if advisory.engine != fingerprint.engine:
            continue
        state = MatchState.AFFECTED
        reasons = [f"engine is {fingerprint.engine}"]
        if advisory.fixed_in is not None:
            fixed = parse_version(advisory.fixed_in)
            if version is None:
                state = MatchState.POSSIBLY_AFFECTED
                reasons.append("version unknown")
            elif fixed is not None and version >= fixed:
                continue
            else:
                reasons.append(f"version {fingerprint.version} < {advisory.fixed_in}")
        if advisory.requires_feature is not None:
            if advisory.requires_feature in fingerprint.features:
                reasons.append(f"{advisory.requires_feature} mode detected")
            else:
                state = MatchState.POSSIBLY_AFFECTED
                reasons.append(f"applies only in {advisory.requires_feature} mode, which was not detected")
        found.append(Match(advisory, state, "; ".join(reasons)))
    return found
