"""``kvfence audit admission`` against the simulated provider: the boundary, and engines' own limits."""

from __future__ import annotations

import pytest

from tests.audit.conftest import AuditRun, check_result
from tests.audit.simprovider import ProviderConfig, run_provider


@pytest.mark.parametrize("boundary", ["clamp", "reject"])
def test_an_honest_provider_passes_whether_it_clamps_or_refuses_at_the_boundary(
        boundary: str, run_audit: AuditRun) -> None:
    """A prompt that fits, with max_tokens past the context, may be clamped: a note, not a finding."""
    with run_provider(ProviderConfig(boundary=boundary, context=2048)) as url:
        result, data = run_audit("admission", url, "--seed", "4")
    assert result.exit_code == 0, result.output
    admission = check_result(data, "admission")
    assert admission["verdict"] == "pass" and not admission["evidence"]
    near = {a["outcome"] for a in admission["measurements"]["answers"] if a["probe"] == "just above context"}
    assert near == ({"clamped (answered, generation stopped at the context)"} if boundary == "clamp"
                    else {"rejected"})
    assert any("just above context" in n and ("clamps" if boundary == "clamp" else "rejected with 400") in n
               for n in admission["notes"])
    must_reject = [a for a in admission["measurements"]["answers"] if a["expect"] == "reject"]
    assert must_reject and all(a["status"] == 400 for a in must_reject)


def test_a_truncating_provider_is_a_finding_and_a_stale_state_answer_is_critical(run_audit: AuditRun) -> None:
    with run_provider(ProviderConfig(mode="truncate", context=2048)) as url:
        result, data = run_audit("admission", url, "--seed", "4")
    assert result.exit_code == 1, result.output
    evidence = check_result(data, "admission")["evidence"]
    assert {e["severity"] for e in evidence} == {"high"} and all(e["impact"] for e in evidence)
    assert any("prompt alone over context" in e["title"] for e in evidence)
    assert not any("just above context" in e["title"] for e in evidence)
    with run_provider(ProviderConfig(mode="leaking", context=2048, leak_words=10)) as url:
        result, data = run_audit("admission", url, "--seed", "4")
    assert result.exit_code == 1, result.output
    evidence = check_result(data, "admission")["evidence"]
    stale = [e for e in evidence if "carries text of an earlier request" in e["title"]]
    assert stale and all(e["severity"] == "critical" for e in stale)


@pytest.mark.parametrize(("style", "source"), [
    ("llamacpp", "/v1/models meta.n_ctx"),
    ("tgi", "/info max_total_tokens (TGI)"),
    ("sglang", "/get_server_info context_length (SGLang)"),
    ("ollama", "/api/ps context_length"),
    ("vllm", "/v1/models max_model_len"),
])
def test_engines_context_and_capacity_are_discovered(style: str, source: str, run_audit: AuditRun) -> None:
    with run_provider(ProviderConfig(discovery=style, context=1024, kv_capacity=3072)) as url:
        result, data = run_audit("admission", url, "--seed", "2")
    assert result.exit_code == 0, result.output
    m = check_result(data, "admission")["measurements"]
    assert m["max_context"] == 1024 and m["max_context_source"].startswith(source)
    if style in ("tgi", "sglang", "vllm"):
        assert m["kv_capacity"] == 3072, m["kv_capacity_source"]
    if style == "llamacpp":
        assert m["kv_capacity"] == 1024 and "/props" in m["kv_capacity_source"]
