"""``kvfence audit leak`` against the simulated provider: short leaks are found, honest answers are not."""

from __future__ import annotations

import pytest

from kvfence.audit.prompts import SYLLABLES
from kvfence.audit.scan import false_alarm_bound, shortest_run
from tests.audit.conftest import AuditRun, check_result
from tests.audit.simprovider import ProviderConfig, run_provider

_LEAK = ["--victim-requests", "4", "--concurrency", "4", "--prompt-tokens", "600"]


@pytest.mark.parametrize("words", [6, 8, 11])
def test_a_short_leak_in_every_answer_is_found(words: int, run_audit: AuditRun) -> None:
    with run_provider(ProviderConfig(mode="leaking", leak_words=words, context=2048)) as url:
        result, data = run_audit("leak", url, "--seed", str(words), *_LEAK)
    assert result.exit_code == 1, result.output
    leak = check_result(data, "leak")
    assert leak["measurements"]["leak_run_words"] <= 6
    assert any("of A's prompt words" in e["detail"] for e in leak["evidence"])
    assert all(e["severity"] == "critical" and e["impact"] for e in leak["evidence"])


def test_an_honest_provider_passes_and_the_false_alarm_bound_is_printed(run_audit: AuditRun) -> None:
    with run_provider(ProviderConfig(context=2048)) as url:
        result, data = run_audit("leak", url, "--seed", "1", *_LEAK)
    assert result.exit_code == 0, result.output
    leak = check_result(data, "leak")
    bound = leak["measurements"]["leak_false_alarm_bound"]
    assert 0 < bound <= 1e-6
    assert any(f"{bound:.1e}" in n and "by chance" in n for n in leak["notes"])


def test_the_run_length_follows_from_the_vocabulary_and_the_volume() -> None:
    assert shortest_run(len(SYLLABLES), 20_000, 10_000) == 5
    assert shortest_run(52, 20_000, 10_000) == 9  # the random letters need longer runs
    assert false_alarm_bound(len(SYLLABLES), 5, 20_000, 10_000) <= 1e-6 < false_alarm_bound(
        len(SYLLABLES), 4, 20_000, 10_000)
