"""``kvfence audit leak``: does tenant A's text ever reach tenant B's answers?

Tenant A sends long prompts carrying unique canaries at both ends and, between them, random words
of a vocabulary nobody else uses (``prompts.SYLLABLES``), so that even a short run of them in B's
answer is improbable by chance: the shortest run that counts is chosen for a false-alarm rate of
``scan.DEFAULT_FALSE_ALARM``, and the bound for what was actually scanned is reported. Some of A's
requests complete and some are dropped mid-stream.
Tenant B then sends the requests that broke real engines: over-length prompts, streams it abandons
after the first chunk, and bursts concurrent with A's traffic, then ordinary follow-ups. Every
answer B receives, error bodies included, is scanned for A's canaries and prompt n-grams.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass
from typing import Any

from kvfence.audit.admission import FIT_TOLERANCE
from kvfence.audit.client import EndpointClient, Reply
from kvfence.audit.discovery import calibrate
from kvfence.audit.errors import AuditCannotRun
from kvfence.audit.preamble import prepare_check
from kvfence.audit.prompts import SYLLABLES, distinctive_units, make_canary, random_units, spaced
from kvfence.audit.scan import DEFAULT_FALSE_ALARM, SecretIndex, shortest_run
from kvfence.audit.verdict import CheckResult, Evidence, Severity, Verdict
from kvfence.errors import ConfigError

__all__ = ["LeakConfig", "run_leak"]

_DEFAULT_LONG_PROMPT_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class LeakConfig:
    """Knobs of the leak check."""

    victim_requests: int = 8
    concurrency: int = 8
    max_tokens: int = 32
    prompt_tokens: int | None = None
    seed: int | None = None

    def validate(self) -> None:
        for name, value in (("--victim-requests", self.victim_requests), ("--concurrency", self.concurrency),
                            ("--max-tokens", self.max_tokens)):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        if self.prompt_tokens is not None and self.prompt_tokens < 16:
            raise ConfigError(f"--prompt-tokens must be at least 16, got {self.prompt_tokens}")


@dataclass(slots=True)
class _Exchange:
    phase: str
    request_id: str
    reply: Reply


async def run_leak(client: EndpointClient, config: LeakConfig) -> CheckResult:
    """Run A's canary traffic and B's adversarial traffic; any canary in B's answers is a finding."""
    config.validate()
    target = client.target
    if target.tenant_b is None:
        raise AuditCannotRun("the leak check needs two tenants: pass --key-b with a key of another organisation")
    tenant_a, tenant_b = target.tenant_a, target.tenant_b
    setup = await prepare_check(client, config.seed)
    rng, token_model, max_context = setup.rng, setup.token_model, setup.max_context
    long_tokens = config.prompt_tokens or (
        max(16, min(max_context // 2, 4096)) if max_context else _DEFAULT_LONG_PROMPT_TOKENS
    )
    if max_context is not None and long_tokens + config.max_tokens > max_context:
        raise ConfigError(f"--prompt-tokens {long_tokens} + --max-tokens does not fit the context {max_context}")
    # A syllable costs up to 4 tokens (one per byte with its space, on a byte-level tokenizer); the
    # calibration probes stay within a quarter of the context however many that is.
    victim_model, _, _ = await calibrate(client, tenant_a, rng, max_context, distinctive_units, 4)
    victim_units = victim_model.units_for(long_tokens)
    victims = 2 * config.victim_requests + config.concurrency
    attackers = 4 + 2 * max(2, config.concurrency // 2) + config.concurrency + max(2, config.concurrency // 2)
    index = SecretIndex(ngram=shortest_run(len(SYLLABLES), victims * victim_units,
                                           attackers * (config.max_tokens + 256)),
                        vocab_size=len(SYLLABLES))
    victim_log: list[_Exchange] = []

    async def victim(request_id: str, *, abort: bool) -> None:
        prompt, canary, body = _canary_prompt(rng, victim_units)
        index.add(request_id, body, [canary])
        reply = await client.generate(tenant_a, prompt, max_tokens=config.max_tokens, stream=abort,
                                      abort_after_chunks=1 if abort else None)
        client.raise_for_auth(reply, tenant_a)
        victim_log.append(_Exchange("victim", request_id, reply))

    b_log: list[_Exchange] = []

    async def attacker(phase: str, request_id: str, tokens: int, *, stream: bool = False,
                       abort: bool = False) -> None:
        prompt = " ".join(random_units(rng, token_model.units_for(tokens)))
        reply = await client.generate(tenant_b, prompt, max_tokens=config.max_tokens, stream=stream or abort,
                                      abort_after_chunks=1 if abort else None)
        client.raise_for_auth(reply, tenant_b)
        b_log.append(_Exchange(phase, request_id, reply))

    # Phase 1: A's canaries, half completed, half dropped after the first chunk (pages freed mid-use).
    for i in range(config.victim_requests):
        await victim(f"A-{i + 1}", abort=i % 2 == 1)
    if not any(e.reply.ok for e in victim_log):
        first = victim_log[0].reply
        raise AuditCannotRun(f"tenant A's requests all failed ({first.status}): {first.error or first.transport_error}")
    # Phase 2: B's over-length requests, right after A's.
    # Over the context even when the letters-to-tokens fit misses (see admission.FIT_TOLERANCE).
    over = (max_context + max(8, max_context // 50, 0 if token_model.exact else math.ceil(FIT_TOLERANCE * max_context))
            if max_context is not None else None)
    if over is not None:
        await attacker("over-length", "B-over-plain", over)
        await attacker("over-length", "B-over-stream", over, stream=True)
    # Phase 3: B abandons streams mid-answer, then asks again.
    short = max(16, long_tokens // 4)
    for i in range(max(2, config.concurrency // 2)):
        await attacker("aborted", f"B-abort-{i + 1}", long_tokens, abort=True)
        await attacker("after-abort", f"B-after-abort-{i + 1}", short)
    # Phase 4: bursts where A's canary requests and B's requests (some over-length) run together.
    burst: list[Any] = []
    for i in range(config.concurrency):
        burst.append(victim(f"A-burst-{i + 1}", abort=i % 3 == 2))
        if over is not None and i % 4 == 3:
            burst.append(attacker("concurrent", f"B-burst-over-{i + 1}", over + 32, stream=True))
        else:
            burst.append(attacker("concurrent", f"B-burst-{i + 1}", short, stream=i % 2 == 0))
    await asyncio.gather(*burst)
    # Phase 5: ordinary follow-ups, longer answers, after everything above.
    for i in range(max(2, config.concurrency // 2)):
        await attacker("follow-up", f"B-follow-{i + 1}", short)

    result = CheckResult(
        check="leak", verdict=Verdict.PASS, summary="", endpoint=target.base_url, model=setup.model,
        parameters={"victim_requests": config.victim_requests, "concurrency": config.concurrency,
                    "max_tokens": config.max_tokens, "victim_prompt_tokens": long_tokens,
                    "seed": config.seed, **setup.parameters()},
    )
    phases: dict[str, dict[str, int]] = {}
    for exchange in b_log:
        counts = phases.setdefault(exchange.phase, {"sent": 0, "answered_200": 0, "rejected_4xx": 0, "other": 0})
        counts["sent"] += 1
        status = exchange.reply.status
        key = "answered_200" if status == 200 else "rejected_4xx" if 400 <= status < 500 else "other"
        counts[key] += 1
        for hit in index.scan(exchange.reply.scannable_text):
            what = "canary" if hit.kind == "canary" else f"run of {index.ngram}+ of A's prompt words"
            result.evidence.append(Evidence(
                title=f"tenant B's {exchange.phase} request {exchange.request_id} received tenant A's text",
                detail=f"{what} {hit.matched!r} from A's request {hit.source_request} (HTTP {status})",
                data={"status": status, "answer_excerpt": exchange.reply.scannable_text[:400]},
                severity=Severity.CRITICAL,
                impact="Another customer's prompt text came back in this customer's answer: a cross-tenant "
                       "data leak, the incident's symptom.",
            ))
    ordinary = [e for e in b_log if e.phase in ("after-abort", "follow-up")]
    if ordinary and not any(e.reply.ok for e in ordinary):
        first = ordinary[0].reply
        raise AuditCannotRun(f"tenant B's ordinary requests all failed ({first.status}): "
                             f"{first.error or first.transport_error}")
    bound = index.false_alarm_bound()
    result.notes.append(
        f"B's answers were scanned for A's canaries and for any run of {index.ngram} or more consecutive words of "
        f"A's prompts (drawn at random from {len(SYLLABLES)} syllables); the chance that such a run turned up "
        f"by chance in what was scanned is at most {bound:.1e} (target {DEFAULT_FALSE_ALARM:.0e})")
    result.measurements = {
        "leak_run_words": index.ngram,
        "leak_false_alarm_bound": bound,
        "victim_vocabulary": len(SYLLABLES),
        "victim_requests_sent": len(victim_log),
        "victim_canaries": len(index),
        "attacker_requests": phases,
        "attacker_answers_scanned": len(b_log),
    }
    clean = (f"none of {len(b_log)} answers to tenant B carried any of tenant A's "
             f"{len(index)} canaries or prompt text")
    if result.evidence:
        result.verdict = Verdict.FINDING
        result.summary = f"{len(result.evidence)} answer(s) to tenant B carried tenant A's text"
    elif max_context is None:
        # The incident's trigger is an over-length request; without a context it was never sent.
        result.verdict = Verdict.INCONCLUSIVE
        result.summary = (f"could not determine: {clean}, but no over-length request was sent because the "
                          "endpoint advertises no context; pass --max-context N")
    else:
        result.summary = clean
    result.duration_s = setup.elapsed()
    return result


def _canary_prompt(rng: random.Random, units: int) -> tuple[str, str, str]:
    """A prompt of about ``units`` syllables; returns it, its canary, and its body of random syllables."""
    canary = make_canary(rng)
    head = " ".join(spaced(canary))
    # The canary opens and closes the prompt, so a leak of either end carries it.
    body = " ".join(distinctive_units(rng, max(1, units - len(canary) // 2)))
    return f"{head} {body} {head}", canary, body
