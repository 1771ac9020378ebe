"""``kvfence audit eviction``: does another tenant's traffic push my cached prompt out (a side channel)?

Even when cache hits never cross tenants, a prefix cache whose eviction order is shared by every
tenant (one LRU over the pool) lets tenant B's traffic evict tenant A's cached pages: A then sees
fewer cached tokens and a slower first token, in proportion to how much B sent ("prime + probe";
kvfence serve's ``--unsafe-shared-prefix-cache``). Per trial, in random order:

* **quiet**: A sends a prompt (prime); B sends ``n`` requests that repeat one short prompt (B is
  active, but needs almost no pages); A re-sends its prompt (probe);
* **pressure**: the same, but B's ``n`` requests are distinct prompts that together fill 1.5x the
  endpoint's KV capacity;
* **cold**: B quiet, then A sends a prompt it never sent: what a probe looks like with no cache.

A finding is a probe that keeps less of its cache under pressure than when quiet. Measured with
``usage.prompt_tokens_details.cached_tokens`` where the endpoint reports it (exact), else with the
time to first token and the KS test (``stats``); a pass needs the power to see an eviction: the
pressure probes must be measurably faster than cold ones (an evicted prompt is a cold prompt).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

from kvfence.audit.client import EndpointClient, Reply
from kvfence.audit.discovery import kv_capacity
from kvfence.audit.errors import AuditCannotRun
from kvfence.audit.preamble import prepare_check
from kvfence.audit.prompts import random_units
from kvfence.audit.target import Tenant
from kvfence.audit.verdict import CheckResult, Evidence, Severity, Verdict
from kvfence.errors import ConfigError
from kvfence.extras import missing_extra

__all__ = ["EvictionConfig", "run_eviction"]

_CONDITIONS = ("quiet", "pressure", "cold")


@dataclass(frozen=True, slots=True)
class EvictionConfig:
    """Knobs of the eviction check."""

    trials: int = 16
    alpha: float = 1e-3
    beta: float = 0.01
    max_requests: int = 64  # B's requests per pressure trial, at most
    seed: int | None = None

    def validate(self) -> None:
        if self.trials < 4:
            raise ConfigError(f"--trials must be at least 4 per condition, got {self.trials}")
        if self.max_requests < 1:
            raise ConfigError(f"--max-requests must be at least 1, got {self.max_requests}")
        for name, value in (("--alpha", self.alpha), ("--beta", self.beta)):
            if not 0.0 < value < 1.0:
                raise ConfigError(f"{name} must be in (0, 1), got {value}")


@dataclass(slots=True)
class _Probe:
    condition: str
    ttft_s: float | None
    cached_fraction: float | None


async def run_eviction(client: EndpointClient, config: EvictionConfig) -> CheckResult:
    """Prime, B's quiet or heavy traffic, probe; compare A's cache hits and TTFT across conditions."""
    config.validate()
    try:  # the tests are SciPy's: the audit extra, checked before a single request is sent
        import scipy.stats  # noqa: F401
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, "the eviction check")
        if missing is None:
            raise
        raise AuditCannotRun(str(missing)) from exc
    target = client.target
    if target.tenant_b is None:
        raise AuditCannotRun("the eviction check needs two tenants: pass --key-b with a key of another organisation")
    setup = await prepare_check(client, config.seed)
    rng, token_model, max_context = setup.rng, setup.token_model, setup.max_context
    if max_context is None:
        raise AuditCannotRun("the endpoint's context is unknown; pass --max-context N")
    capacity = await kv_capacity(client, target.kv_capacity)
    if capacity is None:
        raise AuditCannotRun("the endpoint does not expose its KV capacity, so the traffic that would fill it "
                             "is unknown; pass --kv-capacity N")
    # Long enough for its prefill to show in TTFT, short enough to fit one scope's share of a partitioned
    # cache (kvfence: the budget split between the active scopes, here A and B).
    victim_tokens = max(16, min(max_context // 2, capacity.tokens // 4, 2048))
    pressure_tokens = max(16, int(max_context * 0.8) - 8)
    count = math.ceil(1.5 * capacity.tokens / pressure_tokens)
    if count > config.max_requests:
        raise AuditCannotRun(f"filling the {capacity.tokens}-token KV pool takes {count} requests of "
                             f"{pressure_tokens} tokens per trial, more than --max-requests {config.max_requests}")
    victim_units = token_model.units_for(victim_tokens)
    pressure_units = token_model.units_for(pressure_tokens)
    quiet_prompt = " ".join(random_units(rng, 8))
    tenant_a, tenant_b = target.tenant_a, target.tenant_b
    plan = [c for c in _CONDITIONS for _ in range(config.trials)]
    rng.shuffle(plan)
    probes: list[_Probe] = []
    failures = 0
    for condition in plan:
        prompt = " ".join(random_units(rng, victim_units))
        if condition != "cold":
            prime = await _send(client, tenant_a, prompt, stream=False)
            if not prime.ok:
                failures += 1
                continue
        for _ in range(count):
            text = " ".join(random_units(rng, pressure_units)) if condition == "pressure" else quiet_prompt
            await _send(client, tenant_b, text, stream=False)
        probe = await _send(client, tenant_a, prompt, stream=True)
        if not probe.ok:
            failures += 1
            continue
        fraction = (probe.cached_tokens / probe.prompt_tokens
                    if probe.cached_tokens is not None and probe.prompt_tokens else None)
        probes.append(_Probe(condition, probe.ttft_s, fraction))
        if failures > 0.1 * len(plan) + 2:
            raise AuditCannotRun(f"too many failed requests ({failures}) during the eviction trials")
    result = CheckResult(
        check="eviction", verdict=Verdict.INCONCLUSIVE, summary="", endpoint=target.base_url, model=setup.model,
        parameters={"trials_per_condition": config.trials, "alpha": config.alpha, "beta": config.beta,
                    "victim_prompt_tokens": victim_tokens, "pressure_requests": count,
                    "pressure_prompt_tokens": pressure_tokens, "kv_capacity": capacity.tokens,
                    "kv_capacity_source": capacity.source, "seed": config.seed, **setup.parameters()},
    )
    by: dict[str, list[_Probe]] = {c: [p for p in probes if p.condition == c] for c in _CONDITIONS}
    result.measurements = {
        "conditions": {c: {"probes": len(ps),
                           "cached_fraction": [p.cached_fraction for p in ps],
                           "ttft_ms": [round(p.ttft_s * 1000, 3) for p in ps if p.ttft_s is not None]}
                       for c, ps in by.items()},
        "failed_trials": failures,
    }
    reported = [p for p in probes if p.cached_fraction is not None]
    if probes and len(reported) >= 0.9 * len(probes):
        _decide_cached(result, by, config)
    else:
        _decide_ttft(result, by, config)
    result.duration_s = setup.elapsed()
    return result


_IMPACT = ("Another customer's traffic pushes this customer's cached prompt out of the cache, so anyone can "
           "learn, by timing their own requests, how much others are sending (and with crafted traffic, when).")


def _decide_cached(result: CheckResult, by: dict[str, list[_Probe]], config: EvictionConfig) -> None:
    quiet = [p.cached_fraction or 0.0 for p in by["quiet"]]
    pressure = [p.cached_fraction or 0.0 for p in by["pressure"]]
    result.measurements["signal"] = "usage.prompt_tokens_details.cached_tokens"
    if not quiet or not pressure:
        result.summary = "could not determine: too few successful probes"
        return
    quiet_median = median(quiet)
    result.measurements["median_cached_fraction"] = {"quiet": quiet_median, "pressure": median(pressure)}
    if quiet_median < 0.5:
        result.summary = ("could not determine: even without B's traffic, A's repeated prompt found less than "
                          f"half of it cached (median {quiet_median:.0%}); no prefix cache to observe")
        return
    from scipy.stats import mannwhitneyu

    test = mannwhitneyu(quiet, pressure, alternative="greater")
    p_value = float(test.pvalue)
    result.measurements["p_value"] = p_value
    lost = sum(1 for f in pressure if f < 0.5 * quiet_median)
    result.measurements["pressure_probes_that_lost_their_cache"] = lost
    if p_value < config.alpha:
        result.verdict = Verdict.FINDING
        result.summary = (f"tenant B's traffic evicted tenant A's cached prompt: {lost} of {len(pressure)} probes "
                          f"after B filled the KV pool kept under half of what they kept otherwise "
                          f"(median cached {median(pressure):.0%} vs {quiet_median:.0%}, Mann-Whitney p={p_value:.2g})")
        result.evidence.append(Evidence(
            title="another tenant's traffic evicts this tenant's prefix cache",
            detail=result.summary, data={"p_value": p_value}, severity=Severity.MEDIUM, impact=_IMPACT))
        return
    # With no eviction at all among n pressure probes, an eviction that hit at least half of them
    # would have been missed with probability at most 2**-n.
    if lost == 0 and 0.5 ** len(pressure) <= config.beta:
        result.verdict = Verdict.PASS
        result.summary = (f"B's traffic (1.5x the KV pool) did not evict A's cache: all {len(pressure)} probes kept "
                          f"their cached tokens (median {median(pressure):.0%}, as when quiet)")
        return
    result.summary = (f"could not determine: {lost} of {len(pressure)} pressure probes lost their cache, not "
                      "significant at the chosen error rate; run more --trials")


def _decide_ttft(result: CheckResult, by: dict[str, list[_Probe]], config: EvictionConfig) -> None:
    from kvfence.audit.stats import compare_timings

    result.measurements["signal"] = "time to first token (KS test)"
    samples = {c: [p.ttft_s for p in ps if p.ttft_s is not None] for c, ps in by.items()}
    if min(len(v) for v in samples.values()) < 2:
        result.summary = "could not determine: too few timed probes"
        return
    visible = compare_timings(samples["quiet"], samples["cold"])
    squeezed = compare_timings(samples["quiet"], samples["pressure"])
    result.measurements["ttft"] = {"quiet_vs_cold": visible.to_json(), "quiet_vs_pressure": squeezed.to_json()}
    if not visible.detects_cache(config.alpha):
        result.summary = ("could not determine: A's repeated prompt was not measurably faster than a new one even "
                          "without B's traffic (no prefix cache visible in TTFT); more --trials may help")
        return
    if squeezed.detects_cache(config.alpha):
        result.verdict = Verdict.FINDING
        result.summary = (f"tenant B's traffic slows tenant A's cached prompt: median TTFT {squeezed.median_miss_ms:.1f} ms "
                          f"after B filled the KV pool vs {squeezed.median_hit_ms:.1f} ms otherwise "
                          f"(KS D={squeezed.ks_statistic:.2f}, p={squeezed.p_value:.2g})")
        result.evidence.append(Evidence(
            title="another tenant's traffic evicts this tenant's prefix cache (seen in TTFT)",
            detail=result.summary, data={"p_value": squeezed.p_value}, severity=Severity.MEDIUM, impact=_IMPACT))
        return
    # An evicted prompt is a cold prompt: pressure probes measurably faster than cold ones rule it out.
    if compare_timings(samples["pressure"], samples["cold"]).detects_cache(config.beta):
        result.verdict = Verdict.PASS
        result.summary = "B's traffic (1.5x the KV pool) did not change A's cache hits, with the power to see it"
        return
    result.summary = "could not determine: no eviction detected, but too few trials to rule it out; run more --trials"


async def _send(client: EndpointClient, tenant: Tenant, prompt: str, *, stream: bool) -> Reply:
    reply = await client.generate(tenant, prompt, max_tokens=1, stream=stream, transient_retries=2)
    client.raise_for_auth(reply, tenant)
    return reply
