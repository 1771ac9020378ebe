"""``kvfence audit engine``: what does the endpoint run, and does a known isolation defect apply?

Fingerprint sources, all public and read-only: response headers, ``/version``, ``/get_server_info``
(SGLang), ``/info`` (TGI), ``/metrics`` metric names and ``/v1/models`` ``owned_by``.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

from kvfence.audit.advisories import Fingerprint, MatchState, Severity, match_advisories
from kvfence.audit.client import EndpointClient
from kvfence.audit.errors import AuditCannotRun, EndpointRejected
from kvfence.audit.verdict import CheckResult, Evidence, Verdict
from kvfence.audit.verdict import Severity as FindingSeverity

__all__ = ["GATEWAYS", "collect_fingerprint", "identify", "run_engine"]

_METRIC_NAME = re.compile(r"^(?:# (?:HELP|TYPE) )?([a-zA-Z_:][a-zA-Z0-9_:]*)", re.MULTILINE)
# metric-name prefix -> engine
# (first match wins: the gateway's own metrics before the engine's)
_METRIC_PREFIXES = {"kvfence_gateway_": "kvfence-gateway", "vllm:": "vllm", "sglang:": "sglang", "tgi_": "tgi",
                    "kvfence_": "kvfence", "kvfence:": "kvfence"}
_ENGINE_WORDS = ("kvfence-gateway", "litellm", "vllm", "sglang", "kvfence", "tgi", "text-generation", "lmdeploy",
                 "tensorrt", "triton", "llama.cpp", "ollama")
# Proxies in front of engines: what they say about themselves is not the engine behind them, which
# stays invisible from outside (their own headers and metrics hide it), so no advisory can be ruled out.
GATEWAYS = frozenset({"kvfence-gateway", "litellm"})
# "vllm/0.8.4", "SGLang 0.4.6.post1", "kvfence v0.1.0": an engine word, then its version
_HEADER_VERSION = re.compile(r"(?i)(?:vllm|sglang|kvfence|tgi|text-generation-inference|lmdeploy)[/ _-]v?"
                             r"(\d+\.\d+(?:\.\d+)?(?:[.+-]?[0-9A-Za-z]+)*)")
_HEADER_ENGINES = {"x-kvfence-version": "kvfence", "x-litellm-version": "litellm"}
_HEADERS = ("server", "x-powered-by", "x-kvfence-version", "x-engine", "via", "openai-version",
            "x-litellm-version", "x-request-id")


async def collect_fingerprint(client: EndpointClient) -> tuple[Fingerprint, dict[str, Any]]:
    """Ask every public self-description endpoint; return the fingerprint and the raw answers."""
    tenant = client.target.tenant_a
    raw: dict[str, Any] = {}
    models = await client.models()
    raw["models.owned_by"] = sorted({str(m.get("owned_by")) for m in models if m.get("owned_by")})
    headers: dict[str, str] = {}
    for path in ("/v1/models", "/version", "/get_server_info", "/server_info", "/info", "/v1/capacity", "/metrics",
                 "/health"):
        response = await client.get(path, tenant)
        if response is None:
            continue
        for name in _HEADERS:
            if name in response.headers:
                headers[name] = response.headers[name]
        if response.status_code != 200:
            continue
        if path == "/metrics":
            names = sorted(set(_METRIC_NAME.findall(response.text)))
            raw["metrics.names"] = names[:400]
        elif path != "/health":
            try:
                raw[path] = response.json()
            except ValueError:
                raw[path] = response.text[:300]
    raw["headers"] = headers
    return identify(raw), raw


def identify(raw: dict[str, Any]) -> Fingerprint:
    """Vote for an engine from every clue (pure); the version comes from the most specific source."""
    votes: Counter[str] = Counter()
    fp = Fingerprint()
    header_version: str | None = None
    for owner in raw.get("models.owned_by", []):
        engine = _engine_in(owner)
        if engine:
            votes[engine] += 2
            fp.evidence.append(("/v1/models owned_by", owner))
    for name in raw.get("metrics.names", []):
        for prefix, engine in _METRIC_PREFIXES.items():
            if name.startswith(prefix):
                votes[engine] += 3
                fp.evidence.append(("/metrics", name))
                break
    for header, value in raw.get("headers", {}).items():
        engine = _engine_in(value) or _HEADER_ENGINES.get(header)
        if engine:
            votes[engine] += 2
            fp.evidence.append((f"header {header}", value))
            version = _HEADER_VERSION.search(value)
            if version and header_version is None and engine not in GATEWAYS:
                header_version = version.group(1)
    server_info = raw.get("/get_server_info") or raw.get("/server_info")
    if isinstance(server_info, dict):
        if any(k in server_info for k in ("disaggregation_mode", "tp_size", "mem_fraction_static")):
            votes["sglang"] += 3
            fp.evidence.append(("/get_server_info", "SGLang server arguments"))
        mode = server_info.get("disaggregation_mode")
        if mode not in (None, "null", "none", ""):
            fp.features.add("disaggregation")
            fp.evidence.append(("/get_server_info disaggregation_mode", str(mode)))
        if isinstance(server_info.get("version"), str):
            fp.version = server_info["version"]
        if server_info.get("engine"):
            votes[_engine_in(str(server_info["engine"])) or str(server_info["engine"]).lower()] += 3
    info = raw.get("/info")
    if isinstance(info, dict) and "text-generation" in str(info.get("router", "")):
        votes["tgi"] += 3
        if fp.version is None and info.get("version"):
            fp.version = str(info["version"])
    version_doc = raw.get("/version")
    if isinstance(version_doc, dict):
        if isinstance(version_doc.get("version"), str):
            fp.version = version_doc["version"]
            fp.evidence.append(("/version", version_doc["version"]))
        if version_doc.get("engine"):
            votes[_engine_in(str(version_doc["engine"])) or str(version_doc["engine"]).lower()] += 3
    if any(n.startswith("vllm:") and "cache_salt" in n for n in raw.get("metrics.names", [])):
        fp.features.add("cache_salt")
    if votes:
        fp.engine = votes.most_common(1)[0][0]
    if fp.version is None and header_version is not None:
        fp.version = header_version  # "Server: vllm/0.8.4": the least specific source, used last
    return fp


def _engine_in(text: str) -> str | None:
    lowered = text.lower()
    for word in _ENGINE_WORDS:
        if word in lowered:
            return "tgi" if word == "text-generation" else word
    if "llamacpp" in lowered:  # llama-server's /v1/models owned_by
        return "llama.cpp"
    return None


async def run_engine(client: EndpointClient) -> CheckResult:
    """Fingerprint the endpoint and match it against the advisory list."""
    started = time.perf_counter()
    target = client.target
    model: str | None
    try:
        model = await client.resolve_model()
    except EndpointRejected:
        raise  # a rejected key: nothing else the endpoint says can be trusted to be about this tenant
    except AuditCannotRun:
        model = target.model
    fingerprint, raw = await collect_fingerprint(client)
    matches = match_advisories(fingerprint)
    result = CheckResult(check="engine", verdict=Verdict.PASS, summary="", endpoint=target.base_url, model=model)
    declared = raw.get("/v1/capacity")
    result.measurements = {
        "declared_cache_scope": declared.get("cache_scope") if isinstance(declared, dict) else None,
        "engine": fingerprint.engine,
        "version": fingerprint.version,
        "features": sorted(fingerprint.features),
        "clues": [{"source": s, "value": v} for s, v in fingerprint.evidence],
        "raw": raw,
        "advisories": [
            {"id": m.advisory.id, "title": m.advisory.title, "severity": m.advisory.severity.value,
             "state": m.state.value, "reason": m.reason, "affected_versions": m.advisory.affected_versions,
             "description": m.advisory.description, "remediation": m.advisory.remediation,
             "sources": list(m.advisory.sources)}
            for m in matches
        ],
    }
    serious = [m for m in matches if m.advisory.severity is not Severity.INFO]
    for m in matches:
        if m.advisory.severity is Severity.INFO:
            result.notes.append(f"{m.advisory.id}: {m.advisory.title} ({m.reason}). {m.advisory.remediation}")
    affected = [m for m in serious if m.state is MatchState.AFFECTED]
    for m in serious:
        result.evidence.append(Evidence(
            title=f"{m.advisory.id} ({m.advisory.severity.value}, {m.state.value}): {m.advisory.title}",
            detail=f"{m.reason}. {m.advisory.remediation} Source: {', '.join(m.advisory.sources)}",
            data={"advisory": m.advisory.id, "state": m.state.value},
            severity=FindingSeverity.HIGH if m.advisory.severity is Severity.HIGH else FindingSeverity.MEDIUM,
            impact=("The engine version has a published isolation defect: "
                    + m.advisory.description.split(". ")[0].rstrip(".") + "."),
        ))
    name = f"{fingerprint.engine} {fingerprint.version or '(version unknown)'}" if fingerprint.engine else None
    # An endpoint that says itself that freed KV pages keep their bytes (kvfence --unsafe-no-scrub,
    # invariant I2 off) has the incident's precondition: a finding, whatever its version.
    no_scrub = isinstance(declared, dict) and declared.get("scrub") is False
    if no_scrub:
        result.evidence.append(Evidence(
            title="KV page scrubbing is off (declared by the endpoint)",
            detail="/v1/capacity says scrub=false: freed KV pages keep the previous request's KV, so one "
                   "bookkeeping fault hands a tenant another tenant's prompt. Restart without the unsafe switch.",
            data={"source": "/v1/capacity", "scrub": False},
            severity=FindingSeverity.HIGH,
            impact="If the engine's page bookkeeping ever slips, a tenant's answer is computed over another "
                   "tenant's prompt: the incident's precondition is in place.",
        ))
    if affected or no_scrub:
        result.verdict = Verdict.FINDING
        problems = [m.advisory.id for m in affected] + (["KV page scrubbing off"] if no_scrub else [])
        result.summary = f"{name or 'the endpoint'}: affected by {', '.join(problems)}"
    elif fingerprint.engine is None:
        result.verdict = Verdict.INCONCLUSIVE
        result.summary = ("could not identify the serving engine from headers, /version, /get_server_info, "
                          "/metrics or /v1/models; ask the provider (see the questionnaire)")
    elif fingerprint.engine in GATEWAYS:
        result.verdict = Verdict.INCONCLUSIVE
        result.summary = (f"the endpoint is a gateway ({fingerprint.engine}); the engine behind it is not visible "
                          "from outside: audit its backends directly, or ask its operator which engine and version "
                          "each one runs (see the questionnaire)")
    elif serious:
        result.verdict = Verdict.INCONCLUSIVE
        result.summary = (f"{name}: possibly affected by {', '.join(m.advisory.id for m in serious)} "
                          "(version or deployment mode not visible from outside)")
    else:
        result.summary = f"{name}: no known isolation advisory applies"
    result.duration_s = round(time.perf_counter() - started, 3)
    return result
