"""`kvfence audit` against an OpenAI-compatible server that is not kvfence and says little about itself.

No usage counts, no advertised context, no capacity endpoint, no metrics, model ids with slashes:
every check must still run, and each one that cannot decide says so (exit 2), never "pass".
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from kvfence.audit.admission import plan_probes
from kvfence.audit.client import EndpointClient, Reply
from kvfence.audit.target import AuditTarget
from tests.audit.conftest import AuditRun, check_result
from tests.audit.plain_backend import PlainConfig, run_plain_backend

_FAST = ["--seed", "3", "--samples", "10", "--prompt-tokens", "200"]


def test_an_endpoint_that_says_nothing_is_never_passed(run_audit: AuditRun, tmp_path: Path) -> None:
    with run_plain_backend(PlainConfig(usage="none")) as url:
        result, data = run_audit("all", url + "/v1/", *_FAST)
    assert result.exit_code == 2, result.output
    verdicts = {c["check"]: c["verdict"] for c in data["checks"]}
    assert verdicts == {"engine": "inconclusive", "admission": "error", "leak": "inconclusive",
                        "cache-sharing": "inconclusive"}
    assert all(c["model"] in (None, "acme-ai/Chat-7B-v2") for c in data["checks"])
    assert "--max-context" in check_result(data, "admission")["summary"]
    leak = check_result(data, "leak")
    assert leak["summary"].startswith("could not determine") and "--max-context" in leak["summary"]
    assert leak["parameters"]["token_calibration"].startswith("assumed")
    report = (tmp_path / "report" / "report.md").read_text()
    assert "None" not in report
    assert not re.search(r"^\|(\s*\|)+\s*$", report, re.MULTILINE)  # no blank table rows
    assert "| unknown | unknown | none seen |" in report
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<td>None</td>" not in html


def test_partial_usage_and_a_known_context(run_audit: AuditRun) -> None:
    """Sizes are assumed (no prompt_tokens): only prompts far above the context may be findings."""
    with run_plain_backend(PlainConfig(usage="partial", context_length=512)) as url:
        result, data = run_audit("admission", url, "--seed", "3")
        leak_result, leak_data = run_audit("leak", url, "--seed", "3", "--prompt-tokens", "128")
    assert result.exit_code == 1, result.output
    admission = check_result(data, "admission")
    assert admission["measurements"]["max_context"] == 512
    assert admission["measurements"]["kv_capacity_source"] == "not exposed"
    assert any("assume one token per letter" in n for n in admission["notes"])
    findings = [a for a in admission["measurements"]["answers"] if a["outcome"].startswith("finding")]
    assert findings and {a["probe"] for a in findings} == {"far above context"}
    near = [a for a in admission["measurements"]["answers"] if a["probe"] == "just above context"]
    assert near and all(a["expect"] == "either" for a in near)
    # The over-length phase ran (context known), nothing leaked: a real pass.
    assert leak_result.exit_code == 0, leak_result.output
    phases = check_result(leak_data, "leak")["measurements"]["attacker_requests"]
    assert phases["over-length"]["sent"] == 2


def test_uncalibrated_probe_plan_never_relies_on_exact_sizes() -> None:
    calibrated = plan_probes(4096, 3000, 16, exact=False)
    assumed = plan_probes(4096, 3000, 16, exact=False, calibrated=False)
    assert [p.name for p in calibrated] == [p.name for p in assumed]
    must_reject = {p.name for p in assumed if p.expect_admit is False}
    assert must_reject == {"far above context"}
    assert all(p.prompt_tokens >= 1.25 * 4096 for p in assumed if p.expect_admit is False)


@pytest.mark.parametrize("style", ["openai", "object"])
def test_an_error_event_mid_stream_is_an_error(style: str) -> None:
    """Both error-event shapes end a streamed answer as an error, not as a short success."""

    async def run(url: str) -> Reply:
        target = AuditTarget.build(endpoint=url, key="key-a", model="acme-ai/Chat-7B-v2", api="chat")
        async with EndpointClient(target) as client:
            return await client.generate(target.tenant_a, "a b c", max_tokens=4, stream=True)

    with run_plain_backend(PlainConfig(stream_error=style)) as url:
        reply = asyncio.run(run(url))
    assert reply.status == 200 and reply.text == "lorem"
    assert reply.error == "engine failed" and not reply.ok


def test_a_text_model_is_preferred_over_listed_embedding_and_speech_models() -> None:
    async def run(url: str) -> str:
        async with EndpointClient(AuditTarget.build(endpoint=url, key="key-a")) as client:
            return await client.resolve_model()

    listed = ("text-embedding-3-small", "whisper-1", "acme-ai/Chat-7B-v2", "other-chat")
    with run_plain_backend(PlainConfig(models=listed)) as url:
        assert asyncio.run(run(url)) == "acme-ai/Chat-7B-v2"


def test_a_reasoning_model_that_refuses_max_tokens_and_temperature(run_audit: AuditRun) -> None:
    """The client switches to max_completion_tokens and the default temperature, and the checks run."""
    with run_plain_backend(PlainConfig(reasoning=True, usage="full", context_length=512)) as url:
        result, data = run_audit("leak", url, "--seed", "3", "--prompt-tokens", "128")
    assert result.exit_code == 0, result.output
    leak = check_result(data, "leak")
    assert leak["measurements"]["attacker_requests"]["follow-up"]["answered_200"] > 0


def test_an_endpoint_that_does_not_stream(run_audit: AuditRun) -> None:
    """stream=true answered with one JSON body: no TTFT to measure (said so), and the answer still counts."""
    with run_plain_backend(PlainConfig(ignores_stream=True, usage="full", context_length=512)) as url:
        result, data = run_audit("cache-sharing", url, *_FAST)
        admission_result, admission_data = run_audit("admission", url, "--seed", "3")
    assert result.exit_code == 2, result.output
    assert "one JSON body" in check_result(data, "cache-sharing")["summary"]
    answers = check_result(admission_data, "admission")["measurements"]["answers"]
    streamed_far = [a for a in answers if a["probe"] == "far above context" and a["stream"]]
    assert streamed_far and all(a["outcome"] == "finding: answered 200" for a in streamed_far)
    assert admission_result.exit_code == 1
