"""``kvfence audit`` through a real ``kvfence gateway`` in front of a real ``kvfence serve``.

The engine runs with ``--cache-scope global`` (it would share across organisations on its own); the
gateway injects a salt per tenant scope, caps lengths with the engine's tokenizer and its
``/v1/capacity``. Through the gateway the audit must see what a customer of the gateway gets:
sharing within a key only, over-length prompts refused with a 4xx, nothing of A in B's answers;
and ``engine`` names the gateway instead of guessing what it fronts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.audit.conftest import AuditRun, check_result
from tests.gateway.conftest import Gateway, KvfenceServe

KEYS = {"a": "kvf-audit-gw-a", "a2": "kvf-audit-gw-a2", "b": "kvf-audit-gw-b"}
TENANTS = {"a": ("acme", "eng"), "a2": ("acme", "ops"), "b": ("globex", "default")}
MODEL = "kvfence-builtin-random-llama"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from kvfence.engine.runner.default_model import ensure_default_model

    engine = KvfenceServe(tmp_path_factory.mktemp("engine"), "--cache-scope", "global", "--num-threads", "1",
                          kv_cache_tokens=2048)
    tmp = tmp_path_factory.mktemp("gateway")
    policy: dict[str, Any] = {
        "gateway": {"audit_log": f"sqlite:///{tmp}/audit.db", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "internal", "allowed_tiers": ["on_prem"]}],
        "backends": [{"name": "kvfence", "url": f"http://127.0.0.1:{engine.port}/v1", "tier": "on_prem",
                      "accepts_cache_salt": True, "capacity": "kvfence", "tokenizer": str(ensure_default_model()),
                      "facts": {"cache_scope": "global", "engine": "kvfence"}}],
        "tenants": [{"name": n, "key_sha256": hash_api_key(k), "organization": TENANTS[n][0],
                     "workspace": TENANTS[n][1], "default_class": "internal"} for n, k in KEYS.items()],
    }
    gateway = Gateway(policy, tmp, env={**os.environ, "KVFENCE_GATEWAY_SECRET": "audit-gw-secret-0123456789"})
    try:
        yield gateway.url
    finally:
        gateway.stop()
        engine.stop()


def test_the_gateway_keeps_tenants_apart_in_front_of_a_global_cache(run_audit: AuditRun, gateway_url: str,
                                                                   tmp_path: Path) -> None:
    keys = ["--key", KEYS["a"], "--same-org-key", KEYS["a2"], "--key-b", KEYS["b"]]
    result, data = run_audit("all", gateway_url, "--model", MODEL, "--seed", "3", "--samples", "200",
                             "--prompt-tokens", "300", "--alpha", "1e-3", keys=keys)
    assert "Traceback" not in result.output
    verdicts = {c["check"]: c["verdict"] for c in data["checks"]}
    engine = check_result(data, "engine")
    assert verdicts["engine"] == "inconclusive" and "gateway" in engine["summary"], engine["summary"]
    assert verdicts["admission"] == "pass", check_result(data, "admission")["evidence"]
    assert verdicts["leak"] == "pass", check_result(data, "leak")["evidence"]
    levels = check_result(data, "cache-sharing")["measurements"]["levels"]
    assert levels["same-key"]["shares_cache"], levels["same-key"]  # the power check: hits exist
    assert not levels["cross-org"]["shares_cache"], levels["cross-org"]
    sharing = check_result(data, "cache-sharing")
    assert verdicts["cache-sharing"] == "pass", (sharing["summary"], {
        name: {k: lv.get(k) for k in ("decision", "samples_per_procedure", "reference_effect", "dkw_margins")}
        | {"D": lv.get("stats", {}).get("ks_statistic")} for name, lv in levels.items()})
    assert result.exit_code == 2  # engine could not be identified behind a gateway: never "safe"
    assert (tmp_path / "report" / "report.md").exists()
