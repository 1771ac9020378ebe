"""``kvfence audit admission``: are prompts that cannot fit rejected with a clear 4xx (I3 from outside)?

Prompts are sized against the endpoint's advertised context (discovered, see ``discovery``, or
``--max-context``) and, when known, its KV capacity: below, at, and above the limit, each sent
plain and streaming. Three cases are kept apart, because only two are defects:

* a prompt that does not fit (the prompt alone is over the context or the KV pool) must get a
  4xx; a 200 (truncation, a placeholder, someone else's KV) is a finding;
* a prompt that fits, with ``max_tokens`` reaching past the context, may be refused or answered
  with generation stopped at the context ("clamped"): either is an honest engine, and what was
  observed is a note, never a finding;
* an answer that carries another request's text is always a finding (critical), whatever the
  probe: that is the incident's symptom, so every answer is scanned for earlier canaries.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from kvfence.audit.client import EndpointClient, Reply
from kvfence.audit.discovery import kv_capacity
from kvfence.audit.errors import AuditCannotRun
from kvfence.audit.preamble import prepare_check
from kvfence.audit.prompts import LETTERS, TokenModel, make_canary, random_units, spaced
from kvfence.audit.scan import SecretIndex, shortest_run
from kvfence.audit.verdict import CheckResult, Evidence, Severity, Verdict
from kvfence.errors import ConfigError

__all__ = ["FIT_TOLERANCE", "AdmissionConfig", "Probe", "plan_probes", "run_admission"]

# How far a letters-to-tokens fit may miss one prompt's size when the tokenizer is not exact.
# Measured with the GPT-2 byte-level BPE and Llama-2 SentencePiece tokenizers of
# tests/server/foreign_models.py, 485-token targets in a 512-token context (calibration probes of
# 10-128 letters), 40 seeds each: standard deviation 2.0 %, worst miss 4.5 %. 8 % is four
# standard deviations, so a probe meant to be over the limit is not under it by chance.
FIT_TOLERANCE = 0.08


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Knobs of the admission check."""

    max_tokens: int = 16
    seed: int | None = None

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError(f"--max-tokens must be at least 1, got {self.max_tokens}")


@dataclass(frozen=True, slots=True)
class Probe:
    """One prompt size to try and what a correct endpoint does with it."""

    name: str
    prompt_tokens: int
    max_tokens: int
    expect_admit: bool | None  # None: either answer is acceptable (size not exact, or a clamp is allowed)
    why: str
    clamp_ok: bool = False  # the prompt fits; only max_tokens reaches past the context: refuse or clamp


def plan_probes(
    max_context: int, capacity: int | None, max_tokens: int, exact: bool, *, calibrated: bool = True
) -> list[Probe]:
    """The prompt sizes to send (pure): around the advertised context and above the KV capacity.

    ``exact``: the endpoint's tokenizer spends a fixed number of tokens per letter, so sizes are
    exact and the limits are probed to the token. Otherwise sizes come from a fit that is good to
    :data:`FIT_TOLERANCE`, and the probes that must fit or must be refused stay that far from the
    limit. Without a calibration (``calibrated=False``: sizes assumed, not measured) only the probe
    far above the context must be rejected; near the limit either answer is accepted, so an
    assumption can never produce a finding.
    """
    margin = max(8, max_context // 50)

    def slack(tokens: int) -> int:
        return 0 if exact else max(margin, math.ceil(FIT_TOLERANCE * tokens))

    near = False if calibrated else None
    fit = max_context - max_tokens
    if fit < 2:
        raise ConfigError(f"--max-tokens {max_tokens} leaves no room for a prompt in a {max_context}-token context")
    below = max(1, fit - max(margin, slack(fit)))
    probes = [
        Probe("below context", below, max_tokens, True,
              f"prompt + max_tokens = {below + max_tokens} <= context {max_context}"),
        Probe("at context", fit, max_tokens, True if exact else None,
              f"prompt + max_tokens = context {max_context} exactly" + ("" if exact else " (size approximate)")),
        # The prompt itself fits here: an engine may refuse, or answer and stop at the context.
        Probe("just above context", fit + (1 if exact else slack(fit)), max_tokens, None,
              f"prompt + max_tokens exceeds context {max_context} (the prompt alone fits)", clamp_ok=True),
        Probe("prompt alone over context", max_context + max(margin, slack(max_context)), 1, near,
              f"the prompt alone exceeds context {max_context}"),
        Probe("far above context", max_context + max(64, max_context // 4), max_tokens, False,
              f"prompt well beyond context {max_context}"),
    ]
    if capacity is not None:
        over = capacity + max(margin, slack(capacity))
        probes.append(Probe("above KV capacity", over, max_tokens, False if calibrated or over >= 1.25 * capacity else None,
                            f"prompt larger than the KV pool of {capacity} tokens"))
    return probes


async def run_admission(client: EndpointClient, config: AdmissionConfig) -> CheckResult:
    """Send the planned probes plain and streaming; judge each answer; scan all for canaries."""
    config.validate()
    target = client.target
    setup = await prepare_check(client, config.seed)
    rng, token_model, max_context = setup.rng, setup.token_model, setup.max_context
    if max_context is None:
        raise AuditCannotRun("the endpoint's context is unknown: /v1/models advertises none (no max_model_len, "
                             "context_length, ...); pass --max-context N")
    capacity = await kv_capacity(client, target.kv_capacity)
    result = CheckResult(
        check="admission", verdict=Verdict.PASS, summary="", endpoint=target.base_url, model=setup.model,
        parameters={"max_tokens": config.max_tokens, "seed": config.seed, **setup.parameters()},
    )
    # Answers are scanned for runs of earlier prompts' random letters as short as the planned
    # volume allows at a false-alarm rate of DEFAULT_FALSE_ALARM (see scan.shortest_run).
    index = SecretIndex(ngram=shortest_run(len(LETTERS), 16 * max_context, 64 * (config.max_tokens + 256)),
                        vocab_size=len(LETTERS))
    prober = target.tenant_b or target.tenant_a
    # Earlier requests whose text must never show up in anyone else's answer.
    for tenant in filter(None, (target.tenant_a, target.tenant_b)):
        for i in range(2):
            request_id = f"{tenant.label} seed {i + 1}"
            prompt, canary, body = _prompt(rng, token_model, max(8, max_context // 4))
            reply = await client.generate(tenant, prompt, max_tokens=config.max_tokens, transient_retries=2)
            client.raise_for_auth(reply, tenant)
            if not reply.ok:
                raise AuditCannotRun(f"a {max_context // 4}-token request failed ({reply.status}): {reply.error}")
            index.add(request_id, body, [canary])
    exact = token_model.exact
    probes = plan_probes(max_context, capacity.tokens if capacity else None, config.max_tokens, exact,
                         calibrated=setup.calibrated)
    if not setup.calibrated:
        result.notes.append(
            "the endpoint reports no usage.prompt_tokens, so prompt sizes assume one token per letter; "
            "only probes far above the limits count as findings")
    rows: list[dict[str, Any]] = []
    for probe in probes:
        for stream in (False, True):
            request_id = f"{probe.name} ({'stream' if stream else 'plain'})"
            # A prompt that must not fit (or must reach past the context) is rounded up, one that must fit down.
            prompt, canary, body = _prompt(rng, token_model, probe.prompt_tokens, over=probe.expect_admit is False or probe.clamp_ok)
            reply = await client.generate(prober, prompt, max_tokens=probe.max_tokens, stream=stream)
            client.raise_for_auth(reply, prober)
            index.add(request_id, body, [canary])
            row = _judge(probe, reply, token_model, prompt, stream, result, max_context)
            for hit in index.scan(reply.scannable_text, exclude=[request_id]):
                row["leak"] = True
                row["outcome"] = "finding: answer carries another request's text"
                result.evidence.append(_stale_state(request_id, hit.kind, hit.matched, hit.source_request, reply))
            rows.append(row)
            # The incident's exact order: right after an over-length request, an ordinary request.
            if probe.expect_admit is False:
                follow_id = f"follow-up after {request_id}"
                follow_prompt, follow_canary, follow_body = _prompt(rng, token_model, max(8, max_context // 8))
                follow = await client.generate(prober, follow_prompt, max_tokens=config.max_tokens)
                index.add(follow_id, follow_body, [follow_canary])
                for hit in index.scan(follow.scannable_text, exclude=[follow_id]):
                    result.evidence.append(_stale_state(follow_id, hit.kind, hit.matched, hit.source_request, follow))
    if capacity is not None and capacity.tokens < max_context:
        result.notes.append(
            f"the advertised context ({max_context}) is larger than the KV capacity ({capacity.tokens} tokens, "
            f"from {capacity.source}): the incident's first fault; prompts between the two must be rejected"
        )
    result.measurements = {
        "max_context": max_context,
        "max_context_source": setup.context_source,
        "kv_capacity": capacity.tokens if capacity else None,
        "kv_capacity_source": capacity.source if capacity else "not exposed",
        "exact_sizes": exact,
        "probes": [asdict(p) for p in probes],
        "leak_run_words": index.ngram,
        "leak_false_alarm_bound": index.false_alarm_bound(),
        "answers": rows,
    }
    findings = len(result.evidence)
    if findings:
        result.verdict = Verdict.FINDING
        result.summary = f"{findings} admission finding(s): see evidence"
    else:
        result.summary = (f"every prompt that cannot fit the {max_context}-token context"
                          + (f" or the {capacity.tokens}-token KV pool" if capacity else "")
                          + " was rejected with a 4xx; no answer carried another request's text")
    result.duration_s = setup.elapsed()
    return result


def _stale_state(request_id: str, kind: str, matched: str, source: str, reply: Reply) -> Evidence:
    return Evidence(
        title=f"answer to '{request_id}' carries text of an earlier request",
        detail=f"{kind} {matched!r} from request '{source}' (HTTP {reply.status})",
        data={"status": reply.status, "answer_excerpt": reply.text[:300]},
        severity=Severity.CRITICAL,
        impact="The answer was computed over another request's prompt: one customer can receive another "
               "customer's data, exactly as in the incident.",
    )


def _prompt(rng: random.Random, token_model: TokenModel, tokens: int, *,
            over: bool = False) -> tuple[str, str, str]:
    """A canary-led prompt of ``tokens`` tokens (or the next size up/down the tokenizer allows),
    its canary, and its random body (the part whose word runs are indexed)."""
    canary = make_canary(rng)
    head = spaced(canary)
    units = token_model.units_over(tokens - 1) if over else token_model.units_for(tokens)
    body = " ".join(random_units(rng, max(1, units - len(head))))
    return " ".join(head) + " " + body, canary, body


_NEAR_PROBES = ("prompt alone over context",)
_NOT_REJECTED_IMPACT = ("A prompt too long for the model was answered as a success, so callers get an answer "
                        "over a cut or substituted prompt; in the incident such answers carried other "
                        "customers' data.")


def _judge(probe: Probe, reply: Reply, token_model: TokenModel, prompt: str, stream: bool,
           result: CheckResult, max_context: int) -> dict[str, Any]:
    """Compare one answer to the probe's expectation; record findings and notes on ``result``."""
    sent_tokens = token_model.tokens(len(prompt.split()))
    row: dict[str, Any] = {
        "probe": probe.name, "stream": stream, "prompt_tokens_sent": sent_tokens,
        "max_tokens": probe.max_tokens, "expect": {True: "admit", False: "reject", None: "either"}[probe.expect_admit],
        "status": reply.status, "error": reply.error, "transport_error": reply.transport_error,
        "prompt_tokens_reported": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
        "answer_chars": len(reply.text), "leak": False, "outcome": "ok",
    }
    label = f"{probe.name} ({'stream' if stream else 'plain'}, ~{sent_tokens} prompt tokens)"
    answered = reply.status == 200 and (bool(reply.text) or reply.finish_reason is not None)
    fits_after_all = (probe.expect_admit is False and not token_model.exact and probe.name in _NEAR_PROBES
                      and reply.prompt_tokens is not None and reply.prompt_tokens >= 0.9 * sent_tokens
                      and reply.prompt_tokens + probe.max_tokens <= max_context)
    if fits_after_all:
        # The size estimate missed by more than FIT_TOLERANCE and the endpoint's own count says the
        # prompt fit. A server that truncates to the limit would look the same here, but the
        # "far above context" probe (+25 %) is never excused and catches it.
        row["outcome"] = "admitted: it fit after all"
        result.notes.append(f"{label}: the endpoint counted {reply.prompt_tokens} prompt tokens, so this probe "
                            "was within the context after all; answered 200 correctly")
    elif probe.expect_admit is False:
        if answered:
            row["outcome"] = "finding: answered 200"
            truncated = reply.prompt_tokens is not None and reply.prompt_tokens < sent_tokens
            result.evidence.append(Evidence(
                title=f"{label}: answered with 200 instead of a 4xx",
                detail=(f"{probe.why}, yet the endpoint answered 200"
                        + (f" and reported {reply.prompt_tokens} prompt tokens (silently truncated)" if truncated
                           else "")),
                data={"status": reply.status, "prompt_tokens_reported": reply.prompt_tokens,
                      "answer_excerpt": reply.text[:300]},
                severity=Severity.HIGH, impact=_NOT_REJECTED_IMPACT,
            ))
        elif 400 <= reply.status < 500:
            if not reply.error or reply.error == "no message":
                row["outcome"] = "rejected without a message"
                result.notes.append(f"{label}: rejected with {reply.status} but without an error message")
            else:
                row["outcome"] = "rejected"
        elif reply.status == 200 and reply.error_event:
            row["outcome"] = "rejected late (200, then an error event, no text)"
            result.notes.append(f"{label}: HTTP 200 then an error event; a CI client may read it as success")
        elif reply.status == 200:
            # Success with nothing readable (an empty stream, an empty or non-OpenAI body, an HTML
            # page): no rejection a client can see, and the incident's answers were 200s too.
            row["outcome"] = "finding: answered 200"
            result.evidence.append(Evidence(
                title=f"{label}: answered with 200 instead of a 4xx",
                detail=(f"{probe.why}, yet the endpoint answered 200 with no readable answer "
                        f"({reply.error or 'no text, no finish reason'}): a client sees success"),
                data={"status": reply.status, "body_excerpt": reply.body[:300]},
                severity=Severity.HIGH, impact=_NOT_REJECTED_IMPACT,
            ))
        else:
            row["outcome"] = "finding: no clear 4xx"
            result.evidence.append(Evidence(
                title=f"{label}: no clear 4xx",
                detail=f"{probe.why}; got status {reply.status} {reply.error or reply.transport_error or ''}".strip(),
                data={"status": reply.status},
                severity=Severity.MEDIUM,
                impact="Over-length prompts fail with a server error instead of a clear refusal, so clients "
                       "cannot tell a too-long prompt from an outage (and retries repeat the load).",
            ))
    elif probe.clamp_ok:
        _judge_clamp(probe, reply, label, sent_tokens, result, max_context, row)
    else:
        if reply.ok:
            if reply.prompt_tokens is not None and reply.prompt_tokens < 0.9 * sent_tokens - 2:
                row["outcome"] = "finding: prompt truncated"
                result.evidence.append(Evidence(
                    title=f"{label}: prompt silently shortened",
                    detail=f"sent ~{sent_tokens} tokens, the endpoint reports {reply.prompt_tokens}",
                    data={"prompt_tokens_reported": reply.prompt_tokens},
                    severity=Severity.HIGH,
                    impact="The model answered without reading the whole prompt, and said nothing: answers "
                           "can be wrong in ways the caller cannot see.",
                ))
        elif probe.expect_admit:
            row["outcome"] = "rejected a prompt that fits"
            result.notes.append(f"{label}: a prompt that fits was refused ({reply.status}: {reply.error})")
        else:
            row["outcome"] = "rejected (size approximate)"
    return row


def _judge_clamp(probe: Probe, reply: Reply, label: str, sent_tokens: int, result: CheckResult,
                 max_context: int, row: dict[str, Any]) -> None:
    """A prompt that fits with ``max_tokens`` past the context: refusing and clamping are both honest.

    Either way the outcome is a note saying what was observed. A silently shortened prompt is
    still a finding (the prompt fit, so nothing had to be cut); text of another request is judged
    by the scan, like every answer.
    """
    if reply.ok:
        reported = reply.prompt_tokens
        if reported is not None and reported < 0.9 * sent_tokens - 2:
            row["outcome"] = "finding: prompt truncated"
            result.evidence.append(Evidence(
                title=f"{label}: prompt silently shortened",
                detail=f"the prompt fits, yet the endpoint reports {reported} of ~{sent_tokens} prompt tokens",
                data={"prompt_tokens_reported": reported}, severity=Severity.HIGH,
                impact="The model answered without reading the whole prompt, and said nothing: answers can be "
                       "wrong in ways the caller cannot see.",
            ))
            return
        used = (reported or sent_tokens) + (reply.completion_tokens or 0)
        clamped = reply.completion_tokens is not None and used <= max_context
        row["outcome"] = "clamped (answered, generation stopped at the context)" if clamped else "answered"
        observed = (f"{reply.completion_tokens} completion tokens" if reply.completion_tokens is not None
                    else "no completion token count") + f", finish_reason={reply.finish_reason}"
        if clamped or reply.completion_tokens is None:
            result.notes.append(f"{label}: {probe.why}; the endpoint answered 200 ({observed}), i.e. it "
                                "clamps generation at the context instead of refusing: allowed, not a defect")
        else:
            result.notes.append(f"{label}: {probe.why}; the endpoint answered 200 and generated past the "
                                f"advertised context ({observed}, {used} tokens in all): its real context may "
                                "be larger than it advertises")
    elif 400 <= reply.status < 500:
        row["outcome"] = "rejected"
        result.notes.append(f"{label}: {probe.why}; rejected with {reply.status} ({reply.error}): allowed")
    else:
        row["outcome"] = f"status {reply.status}"
        result.notes.append(f"{label}: {probe.why}; got status {reply.status} "
                            f"{reply.error or reply.transport_error or ''}".rstrip())
