"""``kvfence audit eviction``: another tenant's traffic must not evict my cached prompt (a side channel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.audit.conftest import AuditRun, check_result
from tests.audit.kvfence_server import kvfence_serve
from tests.audit.simprovider import ProviderConfig, run_provider

_SIM = dict(context=512, kv_capacity=2048, cache_tokens=2048, discovery="kvfence")


@pytest.mark.parametrize(("eviction", "code"), [("scoped", 0), ("shared", 1)])
def test_eviction_against_the_simulated_provider(eviction: str, code: int, run_audit: AuditRun) -> None:
    with run_provider(ProviderConfig(eviction=eviction, **_SIM)) as url:  # type: ignore[arg-type]
        result, data = run_audit("eviction", url, "--seed", "3", "--trials", "8")
    assert result.exit_code == code, result.output
    m = check_result(data, "eviction")["measurements"]
    assert m["signal"].startswith("usage.prompt_tokens_details")
    assert m["median_cached_fraction"]["quiet"] > 0.5
    if eviction == "shared":
        assert check_result(data, "eviction")["evidence"][0]["severity"] == "medium"


def test_eviction_without_cached_tokens_falls_back_to_ttft(run_audit: AuditRun) -> None:
    config = ProviderConfig(eviction="shared", report_cached_tokens=False, **_SIM)  # type: ignore[arg-type]
    with run_provider(config) as url:
        result, data = run_audit("eviction", url, "--seed", "3", "--trials", "16")
    assert result.exit_code == 1, result.output
    assert check_result(data, "eviction")["measurements"]["signal"].startswith("time to first token")


_SERVE = ("--max-model-len", "512", "--kv-cache-tokens", "2048", "--device", "cpu", "--num-threads", "1")


@pytest.mark.slow
@pytest.mark.parametrize(("unsafe", "code"), [(False, 0), (True, 1)])
def test_eviction_against_kvfence_serve(unsafe: bool, code: int, run_audit: AuditRun, tmp_path: Path) -> None:
    extra = ("--unsafe-shared-prefix-cache",) if unsafe else ()
    with kvfence_serve(tmp_path / "serve", *_SERVE, *extra, cache_scope="org") as server:
        result, data = run_audit("eviction", server.url, "--seed", "4", "--trials", "8", keys=server.key_args)
    assert result.exit_code == code, result.output
    m = check_result(data, "eviction")["measurements"]
    assert m["signal"].startswith("usage.prompt_tokens_details")
