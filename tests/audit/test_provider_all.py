"""``kvfence audit all`` against the simulated provider: exit 0 on honest targets, 1 on defective ones."""

from __future__ import annotations

import pytest

from tests.audit.conftest import AuditRun, check_result
from tests.audit.simprovider import ProviderConfig, run_provider

_ARGS = ["--seed", "9", "--prompt-tokens", "600", "--no-progress"]
# llama.cpp-style self-description, so the engine check can identify it (owned_by "llamacpp").
_BASE = dict(discovery="llamacpp", context=2048)

CASES = [
    pytest.param(ProviderConfig(**_BASE), 0, id="honest-clamps"),  # type: ignore[arg-type]
    pytest.param(ProviderConfig(mode="leaking", leak_words=8, **_BASE), 1, id="leaking"),  # type: ignore[arg-type]
    pytest.param(ProviderConfig(cache_scope="global", **_BASE), 1, id="global-cache"),  # type: ignore[arg-type]
    pytest.param(ProviderConfig(boundary="reject", cache_scope="key", **_BASE), 0,  # type: ignore[arg-type]
                 id="honest-refuses-key-scope", marks=pytest.mark.slow),
    pytest.param(ProviderConfig(mode="truncate", **_BASE), 1, id="truncate", marks=pytest.mark.slow),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("config", "code"), CASES)
def test_all_exit_code(config: ProviderConfig, code: int, run_audit: AuditRun) -> None:
    with run_provider(config) as url:
        result, data = run_audit("all", url, *_ARGS)
    assert result.exit_code == code, result.output
    verdicts = {c["check"]: c["verdict"] for c in data["checks"]}
    assert check_result(data, "engine")["measurements"]["engine"] == "llama.cpp"
    if code == 0:
        assert set(verdicts.values()) == {"pass"}, verdicts
    else:
        assert "inconclusive" not in {verdicts["admission"], verdicts["leak"]}, verdicts
