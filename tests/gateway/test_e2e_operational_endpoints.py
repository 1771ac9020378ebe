"""Attack: an anonymous caller reads the gateway's operational endpoints (issue 16, item 9).

``/metrics`` named tenants with their token counts to anyone, and ``/health`` showed upstream error
text (addresses, a backend's own messages) and the tokenizer's file path. Now, as ``kvfence serve``
does: without ``gateway.metrics_key_file`` every caller reads the series summed over tenants; with it,
``/metrics`` is a 401 without the key (a tenant's API key does not open it) and the per-tenant series
with it. ``/health`` stays anonymous and carries no error text and no path. A real gateway process, a
recording backend, a token-limited tenant whose usage is counted, and a backend that is down.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import FakeBackend, Gateway
from tests.netutil import free_port

KEY = "kvf-ops-tenant-key-0123456789"
METRICS_KEY = "metrics-key-for-the-ops-test-0123456789"
TENANT = "acme-secret-project"


@pytest.fixture(scope="module")
def backend() -> Iterator[FakeBackend]:
    b = FakeBackend("ops")
    yield b
    b.stop()


def _policy(tmp: Path, backend: FakeBackend, metrics_key: bool) -> dict[str, object]:
    down = free_port()  # nothing listens there
    gateway: dict[str, object] = {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0,
                                  "load_protection": False}
    if metrics_key:
        (tmp / "metrics.key").write_text(METRICS_KEY + "\n")
        gateway["metrics_key_file"] = "metrics.key"  # relative to the policy file
    return {
        "gateway": gateway,
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [
            {"name": "down", "url": f"http://127.0.0.1:{down}/v1", "tier": "shared", "capacity": "policy",
             "facts": {"advertised_context": 4096, "kv_capacity_tokens": 4096}},
            {"name": "ops", "url": backend.url, "tier": "shared", "capacity": "policy",
             "facts": {"advertised_context": 4096, "kv_capacity_tokens": 4096}},
        ],
        "tenants": [{"name": TENANT, "key_sha256": hash_api_key(KEY), "organization": "acme",
                     "default_class": "public", "limits": {"tokens_per_minute": 1_000_000}}],
    }


def _use(gw: Gateway) -> None:
    response = httpx.post(gw.url + "/chat/completions", headers={"authorization": f"Bearer {KEY}"}, timeout=30,
                          json={"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
    assert response.status_code == 200, response.text


@pytest.fixture(scope="module", params=[False, True], ids=["no-metrics-key", "metrics-key"])
def gateway(request: pytest.FixtureRequest, backend: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, bool]]:
    tmp = tmp_path_factory.mktemp("ops")
    gw = Gateway(_policy(tmp, backend, request.param), tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    _use(gw)  # the down backend fails (its error recorded), the request falls back to "ops"
    yield gw, request.param
    gw.stop()


def test_metrics_never_name_a_tenant_to_an_anonymous_caller(gateway: tuple[Gateway, bool]) -> None:
    gw, locked = gateway
    anonymous = httpx.get(gw.root + "/metrics")
    if locked:
        assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "invalid_api_key"
        with_tenant_key = httpx.get(gw.root + "/metrics", headers={"authorization": f"Bearer {KEY}"})
        assert with_tenant_key.status_code == 401
        assert TENANT not in with_tenant_key.text
        wrong = httpx.get(gw.root + "/metrics", headers={"authorization": "Bearer " + METRICS_KEY[:-1] + "x"})
        assert wrong.status_code == 401
    else:
        assert anonymous.status_code == 200
        assert TENANT not in anonymous.text and 'tenant="' not in anonymous.text
        # the totals are still there for alerting
        assert "kvfence_gateway_tokens_total{" in anonymous.text
    assert TENANT not in anonymous.text


def test_only_the_configured_metrics_key_reads_the_per_tenant_series(gateway: tuple[Gateway, bool]) -> None:
    gw, locked = gateway
    full = httpx.get(gw.root + "/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"})
    assert full.status_code == 200
    # without gateway.metrics_key_file no token opens the per-tenant view
    assert (f'tenant="{TENANT}"' in full.text) is locked


def test_health_is_anonymous_and_minimal(gateway: tuple[Gateway, bool]) -> None:
    gw, _ = gateway
    health = httpx.get(gw.root + "/health")
    assert health.status_code == 200
    answer = health.json()
    assert answer["status"] == "ok"
    assert answer["backends"]["down"]["up"] is False and answer["backends"]["ops"]["up"] is True
    text = health.text
    for leaked in ("ConnectError", "Connect", "refused", "127.0.0.1", "last_error", "/tmp", "/home", "\\\\"):
        assert leaked not in text, f"/health shows {leaked!r}: {text}"
