"""``kvfence audit cache-sharing``: does the endpoint's prompt cache cross keys or organisations?

Procedure (Gu et al., ICML 2025), per level and per trial, trials of both kinds in random order:

* hit: the victim sends a prompt; the prober then sends a prompt sharing its first
  ``prefix_fraction`` and times the first token (streaming);
* miss: the victim sends an unrelated prompt of the same length; the prober sends a fresh random
  prompt and times the first token. The victim's decoy request keeps the two procedures identical
  except for the shared prefix, so server warm-up after a request cannot pass for a cache hit.

The same-key level runs first as a power check (see :func:`sharing_policy.decide`).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

from kvfence.audit.client import EndpointClient, Reply
from kvfence.audit.errors import AuditCannotRun
from kvfence.audit.preamble import prepare_check
from kvfence.audit.prompts import TokenModel, random_units
from kvfence.audit.sharing_policy import AllowedSharing, Level, LevelOutcome, decide
from kvfence.audit.target import Tenant
from kvfence.audit.verdict import CheckResult, Evidence, Verdict
from kvfence.errors import ConfigError
from kvfence.extras import missing_extra

__all__ = ["CacheSharingConfig", "default_prompt_tokens", "run_cache_sharing"]

# Gu et al. used 5,000-token prompts; long prompts make prefill time dominate TTFT noise.
_MAX_DEFAULT_PROMPT_TOKENS = 5000
_DEFAULT_PROMPT_TOKENS_UNKNOWN_CONTEXT = 1024
_MAX_FAILED_FRACTION = 0.1
_RETRY_STATUSES = (429, 503)


@dataclass(frozen=True, slots=True)
class CacheSharingConfig:
    """Knobs of the cache-sharing audit, validated by :meth:`validate`."""

    samples: int = 250
    prompt_tokens: int | None = None
    prefix_fraction: float = 0.95
    victim_requests: int = 1
    alpha: float = 1e-4
    allow_sharing: AllowedSharing = AllowedSharing.ORG
    seed: int | None = None
    pause_s: float = 0.0

    def validate(self) -> None:
        if self.samples < 5:
            raise ConfigError(f"--samples must be at least 5 per procedure, got {self.samples}")
        if self.prompt_tokens is not None and self.prompt_tokens < 16:
            raise ConfigError(f"--prompt-tokens must be at least 16, got {self.prompt_tokens}")
        if not 0.0 < self.prefix_fraction <= 1.0:
            raise ConfigError(f"--prefix-fraction must be in (0, 1], got {self.prefix_fraction}")
        if self.victim_requests < 1:
            raise ConfigError(f"--victim-requests must be at least 1, got {self.victim_requests}")
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"--alpha must be in (0, 1), got {self.alpha}")
        if self.pause_s < 0:
            raise ConfigError(f"--pause must be >= 0 seconds, got {self.pause_s}")


def default_prompt_tokens(max_context: int | None) -> int:
    """Half the advertised context, at most Gu et al.'s 5,000 tokens; 1,024 when unknown."""
    if max_context is None:
        return _DEFAULT_PROMPT_TOKENS_UNKNOWN_CONTEXT
    return max(16, min(_MAX_DEFAULT_PROMPT_TOKENS, max_context // 2))


async def run_cache_sharing(client: EndpointClient, config: CacheSharingConfig) -> CheckResult:
    """Run the audit at every level the given keys allow and decide the verdict."""
    config.validate()
    try:  # the KS test is SciPy's: the audit extra, checked before a single request is sent
        from kvfence.audit.stats import compare_timings
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, "the cache-sharing check")
        if missing is None:
            raise
        raise AuditCannotRun(str(missing)) from exc
    target = client.target
    setup = await prepare_check(client, config.seed)
    rng, token_model, max_context = setup.rng, setup.token_model, setup.max_context
    prompt_tokens = config.prompt_tokens or default_prompt_tokens(max_context)
    if max_context is not None and prompt_tokens + 8 > max_context:
        raise ConfigError(
            f"--prompt-tokens {prompt_tokens} does not fit the advertised context of {max_context} tokens"
        )
    units = max(4, token_model.units_for(prompt_tokens))
    result = CheckResult(
        check="cache-sharing",
        verdict=Verdict.INCONCLUSIVE,
        summary="",
        endpoint=target.base_url,
        model=setup.model,
        parameters={
            "samples_per_procedure": config.samples,
            "prompt_tokens_target": prompt_tokens,
            "prompt_letters": units,
            "prompt_tokens_estimated": token_model.tokens(units),
            "prefix_fraction": config.prefix_fraction,
            "victim_requests": config.victim_requests,
            "alpha": config.alpha,
            "allow_sharing": config.allow_sharing.value,
            "seed": config.seed,
            **setup.parameters(),
            "test": "one-sided two-sample Kolmogorov-Smirnov (H1: hit TTFT stochastically smaller)",
        },
    )
    probers = {Level.SAME_KEY: target.tenant_a, Level.SAME_ORG: target.same_org, Level.CROSS_ORG: target.tenant_b}
    outcomes: list[LevelOutcome] = []
    levels: dict[str, Any] = {}
    for level, prober in probers.items():
        if prober is None:
            outcomes.append(LevelOutcome(level, None))
            levels[level.value] = {"measured": False, "reason": "no key given for this level"}
            result.notes.append(f"level {level.value} not measured: no key given")
            continue
        if level is not Level.SAME_KEY and outcomes and not outcomes[0].shares:
            levels[level.value] = {"measured": False, "reason": "skipped: the power check failed"}
            continue
        hit_s, miss_s, failures = await _measure_level(
            client, target.tenant_a, prober, units, token_model, config, rng
        )
        comparison = compare_timings(hit_s, miss_s)
        shares = comparison.detects_cache(config.alpha)
        outcomes.append(LevelOutcome(level, shares, comparison.p_value))
        levels[level.value] = {
            "measured": True,
            "description": level.description,
            "shares_cache": shares,
            "stats": comparison.to_json(),
            "hit_ttft_ms": [round(t * 1000, 4) for t in hit_s],
            "miss_ttft_ms": [round(t * 1000, 4) for t in miss_s],
            "failed_trials": failures,
        }
        if shares and config.allow_sharing.forbids(level):
            result.evidence.append(Evidence(
                title=f"prompt cache shared at level {level.value}",
                detail=(f"{level.description}: hit median {comparison.median_hit_ms:.2f} ms vs miss median "
                        f"{comparison.median_miss_ms:.2f} ms, KS D={comparison.ks_statistic:.3f}, "
                        f"p={comparison.p_value:.3g}"),
                data={"level": level.value, "p_value": comparison.p_value},
            ))
    result.measurements = {"levels": levels}
    result.verdict, result.summary = decide(outcomes, config.allow_sharing)
    result.duration_s = setup.elapsed()
    return result


async def _measure_level(
    client: EndpointClient,
    victim: Tenant,
    prober: Tenant,
    units: int,
    token_model: TokenModel,
    config: CacheSharingConfig,
    rng: random.Random,
) -> tuple[list[float], list[float], int]:
    trials = ["hit"] * config.samples + ["miss"] * config.samples
    rng.shuffle(trials)
    prefix_units = max(1, min(units, round(units * config.prefix_fraction)))
    hit_s: list[float] = []
    miss_s: list[float] = []
    failures: list[str] = []
    for kind in trials:
        victim_units = random_units(rng, units)
        if kind == "hit":
            probe_units = victim_units[:prefix_units] + random_units(rng, units - prefix_units)
        else:
            probe_units = random_units(rng, units)
        victim_prompt, probe_prompt = " ".join(victim_units), " ".join(probe_units)
        victim_ok = True
        for _ in range(config.victim_requests):
            reply = await _send(client, victim, victim_prompt, stream=False)
            if not reply.ok:
                failures.append(_failure(reply))
                victim_ok = False
        # After a failed victim request its prompt may never have been cached: a probe would put a
        # miss among the hits. The trial is dropped (a failed decoy's too, so both procedures match).
        probe = await _send(client, prober, probe_prompt, stream=True) if victim_ok else None
        if probe is not None:
            if probe.not_streamed:
                raise AuditCannotRun("the endpoint answers stream=true with one JSON body, so the time to the "
                                     "first token cannot be measured; audit the engine behind it, or a route "
                                     "that streams")
            if probe.ok and probe.ttft_s is not None:
                (hit_s if kind == "hit" else miss_s).append(probe.ttft_s)
            else:
                failures.append(_failure(probe) if not probe.ok else "stream carried no token")
        if len(failures) > _MAX_FAILED_FRACTION * len(trials) + 2:
            raise AuditCannotRun(
                f"too many failed requests ({len(failures)}) while measuring {victim.label} vs "
                f"{prober.label} with {units}-letter prompts (~{token_model.tokens(units)} tokens); "
                f"last: {failures[-1]} (try a smaller --prompt-tokens)"
            )
        if config.pause_s:
            await asyncio.sleep(config.pause_s)
    if len(hit_s) < 2 or len(miss_s) < 2:
        raise AuditCannotRun(f"too few successful timing samples; last failure: {failures[-1] if failures else '?'}")
    return hit_s, miss_s, len(failures)


async def _send(client: EndpointClient, tenant: Tenant, prompt: str, *, stream: bool) -> Reply:
    """One request, retried briefly on 429/503 so rate limits do not masquerade as timing data."""
    for attempt in range(4):
        reply = await client.generate(tenant, prompt, max_tokens=1, stream=stream)
        client.raise_for_auth(reply, tenant)
        if reply.status not in _RETRY_STATUSES:
            return reply
        await asyncio.sleep(min(5.0, 0.5 * 2**attempt))
    return reply


def _failure(reply: Reply) -> str:
    return f"HTTP {reply.status}: {reply.error or reply.transport_error or 'no message'}"
