"""``kvfence audit cache-sharing``: does the endpoint's prompt cache cross keys or organisations?

Procedure (Gu et al., ICML 2025), per level and per trial, trials of both kinds in random order:

* hit: the victim sends a prompt; the prober then sends a prompt sharing its first
  ``prefix_fraction`` and times the first token (streaming);
* miss: the victim sends an unrelated prompt of the same length; the prober sends a fresh random
  prompt and times the first token. The victim's decoy request keeps the two procedures identical
  except for the shared prefix, so server warm-up after a request cannot pass for a cache hit.

The same-key level runs first as a power check (see :func:`sharing_policy.decide`), and measures
what a hit looks like. Each level stops as soon as its verdict is decided at the chosen error rates
(``sequential``: ``alpha`` for a false "shares", ``beta`` for a missed sharing), at ``--samples``,
or when ``--time-budget`` runs out; a level left undecided is inconclusive, never a pass.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvfence.audit.client import EndpointClient, Reply
from kvfence.audit.errors import AuditCannotRun
from kvfence.audit.preamble import prepare_check
from kvfence.audit.prompts import TokenModel, random_units
from kvfence.audit.sequential import LevelDecision, SequentialPlan
from kvfence.audit.sharing_policy import AllowedSharing, Level, LevelOutcome, decide
from kvfence.audit.target import Tenant
from kvfence.audit.verdict import CheckResult, Evidence, Severity, Verdict
from kvfence.errors import ConfigError
from kvfence.extras import missing_extra

if TYPE_CHECKING:
    from kvfence.audit.stats import TimingComparison

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
    beta: float = 0.01
    time_budget_s: float | None = None
    fixed_samples: bool = False  # the classic fixed-sample test: one look at --samples
    progress: bool = False  # a progress line with an estimate on stderr

    def plan(self) -> SequentialPlan:
        return SequentialPlan.build(self.samples, self.alpha, self.beta, fixed=self.fixed_samples)

    def validate(self) -> None:
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ConfigError(f"--time-budget must be positive seconds, got {self.time_budget_s}")
        if not 0.0 < self.beta < 1.0:
            raise ConfigError(f"--beta must be in (0, 1), got {self.beta}")
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
        from kvfence.audit.stats import compare_timings  # noqa: F401  (used in _measure_level)
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
            "beta": config.beta,
            "time_budget_s": config.time_budget_s,
            "looks": list(config.plan().looks),
            "test": ("one-sided two-sample Kolmogorov-Smirnov (H1: hit TTFT stochastically smaller), "
                     + ("fixed sample size" if config.fixed_samples else "sequential looks")),
        },
    )
    plan = config.plan()
    clock = _Clock(config, [lvl for lvl, prober in _probers(target).items() if prober is not None])
    probers = _probers(target)
    outcomes: list[LevelOutcome] = []
    levels: dict[str, Any] = {}
    reference: list[float] | None = None  # the same-key level's hit TTFTs: what a shared-cache hit looks like
    reference_distance: float | None = None
    for level, prober in probers.items():
        if prober is None:
            outcomes.append(LevelOutcome(level, None))
            levels[level.value] = {"measured": False, "reason": "no key given for this level"}
            result.notes.append(f"level {level.value} not measured: no key given")
            continue
        if level is not Level.SAME_KEY and outcomes and not outcomes[0].shares:
            levels[level.value] = {"measured": False, "reason": "skipped: the power check failed"}
            continue
        if clock.out_of_time():
            outcomes.append(LevelOutcome(level, None, measured=False, stopped="time budget"))
            levels[level.value] = {"measured": False, "reason": "skipped: the time budget ran out"}
            continue
        measured = await _measure_level(client, target.tenant_a, prober, units, token_model, config, rng,
                                        plan, reference, reference_distance, level, clock)
        comparison, decision = measured.comparison, measured.decision
        if level is Level.SAME_KEY and decision is LevelDecision.SHARES:
            reference, reference_distance = measured.hit_s, comparison.ks_statistic
        shares = {LevelDecision.SHARES: True, LevelDecision.NOT_SHARED: False}.get(decision)
        outcomes.append(LevelOutcome(level, shares, comparison.p_value, stopped=measured.stopped))
        levels[level.value] = {
            "measured": True,
            "description": level.description,
            "shares_cache": shares,
            "decision": decision.value,
            "stopped": measured.stopped,
            "samples_per_procedure": min(comparison.n_hit, comparison.n_miss),
            "seconds": round(measured.seconds, 2),
            "p_value_unlike_same_key_hits": measured.unlike_p,
            "stats": comparison.to_json(),
            "hit_ttft_ms": [round(t * 1000, 4) for t in measured.hit_s],
            "miss_ttft_ms": [round(t * 1000, 4) for t in measured.miss_s],
            "failed_trials": measured.failures,
        }
        if shares and config.allow_sharing.forbids(level):
            result.evidence.append(Evidence(
                title=f"prompt cache shared at level {level.value}",
                detail=(f"{level.description}: hit median {comparison.median_hit_ms:.2f} ms vs miss median "
                        f"{comparison.median_miss_ms:.2f} ms, KS D={comparison.ks_statistic:.3f}, "
                        f"p={comparison.p_value:.3g}"),
                data={"level": level.value, "p_value": comparison.p_value},
                severity=Severity.HIGH,
                impact=("Prompts sent by one customer make the same prompts answer faster for "
                        + ("another organisation" if level is Level.CROSS_ORG else "another key of the organisation")
                        + ", so anyone there can test, by timing, whether someone sent a given text."),
            ))
    result.measurements = {"levels": levels}
    result.verdict, result.summary = decide(outcomes, config.allow_sharing)
    result.duration_s = setup.elapsed()
    return result


def _probers(target: Any) -> dict[Level, Tenant | None]:
    return {Level.SAME_KEY: target.tenant_a, Level.SAME_ORG: target.same_org, Level.CROSS_ORG: target.tenant_b}


class _Clock:
    """The time budget, and a progress line with an estimate of the time left (stderr)."""

    def __init__(self, config: CacheSharingConfig, levels: list[Level]) -> None:
        self.started = time.monotonic()
        self.budget = config.time_budget_s
        self.show = config.progress
        self.samples = config.samples
        self.levels = levels
        self.trial_s = 0.0
        self.trials = 0

    def out_of_time(self) -> bool:
        return self.budget is not None and time.monotonic() - self.started >= self.budget

    def tick(self, level: Level, n: int, next_look: int, trial_s: float) -> None:
        self.trials += 1
        self.trial_s += trial_s
        if not self.show:
            return
        per_trial = self.trial_s / self.trials
        later = len(self.levels) - 1 - self.levels.index(level) if level in self.levels else 0
        # At most: this level to --samples, every later level to --samples; usually far less.
        worst = per_trial * (2 * (self.samples - n) + later * 2 * self.samples)
        to_look = per_trial * 2 * max(0, next_look - n)
        elapsed = time.monotonic() - self.started
        if self.budget is not None:
            worst = min(worst, max(0.0, self.budget - elapsed))
        width = 24
        filled = round(width * n / self.samples)
        line = (f"\rcache-sharing {level.value:<9} [{'#' * filled}{'.' * (width - filled)}] {n}/{self.samples} "
                f"per procedure, {_fmt(elapsed)} elapsed, "
                + (f"next look in ~{_fmt(to_look)}, " if to_look > 0 else "")
                + f"at most ~{_fmt(worst)} left" + (f" (budget {_fmt(self.budget)})" if self.budget else ""))
        end = "" if sys.stderr.isatty() else "\n"
        if sys.stderr.isatty() or n == next_look:
            print(line if end == "" else line.lstrip("\r"), end=end, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.show and sys.stderr.isatty():
            print(file=sys.stderr)


def _fmt(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@dataclass(slots=True)
class _Measured:
    hit_s: list[float]
    miss_s: list[float]
    failures: int
    comparison: TimingComparison
    decision: LevelDecision
    stopped: str  # why the level stopped: decided, sample limit, time budget
    seconds: float
    unlike_p: float | None  # p-value of "this level's hits are slower than same-key hits"


async def _measure_level(
    client: EndpointClient,
    victim: Tenant,
    prober: Tenant,
    units: int,
    token_model: TokenModel,
    config: CacheSharingConfig,
    rng: random.Random,
    plan: SequentialPlan,
    reference: list[float] | None,
    reference_distance: float | None,
    level: Level,
    clock: _Clock,
) -> _Measured:
    from kvfence.audit.stats import compare_timings  # SciPy: the audit extra (checked in run_cache_sharing)

    prefix_units = max(1, min(units, round(units * config.prefix_fraction)))
    hit_s: list[float] = []
    miss_s: list[float] = []
    failures: list[str] = []
    started = time.monotonic()
    stopped = "sample limit"
    comparison: TimingComparison | None = None
    decision = LevelDecision.UNDECIDED
    unlike_p: float | None = None
    planned = 0
    for look in plan.looks:
        # Both procedures, shuffled, until each has `look` samples (failed trials are re-planned).
        while min(len(hit_s), len(miss_s)) < look and not clock.out_of_time():
            need_hit, need_miss = max(0, look - len(hit_s)), max(0, look - len(miss_s))
            trials = ["hit"] * need_hit + ["miss"] * need_miss
            rng.shuffle(trials)
            for kind in trials:
                t0 = time.monotonic()
                await _trial(client, victim, prober, units, prefix_units, kind, config, rng, hit_s, miss_s,
                             failures, token_model)
                planned += 1
                clock.tick(level, min(len(hit_s), len(miss_s)), look, time.monotonic() - t0)
                if clock.out_of_time():
                    break
        if len(hit_s) >= 2 and len(miss_s) >= 2:
            comparison = compare_timings(hit_s, miss_s)
            unlike = compare_timings(reference, hit_s) if reference is not None else None
            unlike_p = unlike.p_value if unlike is not None else None
            decision = plan.decide(comparison, unlike, reference_distance)
            if level is Level.SAME_KEY and decision is LevelDecision.SHARES and not plan.reference_settled(comparison) \
                    and look != plan.looks[-1] and not clock.out_of_time():
                continue  # hits are detected; more samples tighten what a hit looks like for the other levels
            if decision is not LevelDecision.UNDECIDED:
                stopped = "decided"
                break
        if clock.out_of_time():
            stopped = "time budget"
            break
    clock.done()
    if comparison is None:
        raise AuditCannotRun(f"too few successful timing samples; last failure: {failures[-1] if failures else '?'}")
    return _Measured(hit_s, miss_s, len(failures), comparison, decision, stopped, time.monotonic() - started,
                     unlike_p)


async def _trial(client: EndpointClient, victim: Tenant, prober: Tenant, units: int, prefix_units: int, kind: str,
                 config: CacheSharingConfig, rng: random.Random, hit_s: list[float], miss_s: list[float],
                 failures: list[str], token_model: TokenModel) -> None:
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
    done = len(hit_s) + len(miss_s) + len(failures)
    if len(failures) > _MAX_FAILED_FRACTION * done + 2:
        raise AuditCannotRun(
            f"too many failed requests ({len(failures)}) while measuring {victim.label} vs "
            f"{prober.label} with {units}-letter prompts (~{token_model.tokens(units)} tokens); "
            f"last: {failures[-1]} (try a smaller --prompt-tokens)"
        )
    if config.pause_s:
        await asyncio.sleep(config.pause_s)


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
