"""``/metrics`` must not tell an unauthenticated caller who uses the server and how much.

The full exposition labels requests, tokens and prefix-cache hits by organisation (and hits by a
scope id). Before ``--metrics-key-file`` anyone who reached the port read them without a key: these
tests failed on that code (``organization="acme"`` and ``"globex"`` in an anonymous scrape).
Now: without the metrics key a keyed server shows totals only; with ``--metrics-key-file`` it
answers 401 to anyone without that token (tenant keys included) and the full view to the token.
Every body is parsed with Prometheus' own text parser.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvfence.errors import ConfigError
from kvfence.server.auth.metrics_access import MetricsAccess, MetricsView, read_metrics_key
from kvfence.server.config import ServerConfig
from kvfence.server.metrics import ServerMetrics
from kvfence.server.openai.serving import OpenAIServing
from tests.netutil import free_port
from tests.server.conftest import TENANTS, RunningServer, serve

METRICS_KEY = "metrics-" + "k" * 32
ORGS = sorted({org for org, _, _ in TENANTS.values()})


def _families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def _generate(server: RunningServer, who: str, prompt: str) -> int:
    r = httpx.post(server.base_url + "/v1/completions", headers=server.headers(who), timeout=60,
                   json={"prompt": prompt, "max_tokens": 2, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens"])


def _total(families: dict[str, list[tuple[str, dict[str, str], float]]], family: str) -> float:
    return sum(v for name, _, v in families.get(family, []) if name.endswith("_total"))


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server with API keys and no metrics key; two organisations have sent requests (one twice)."""
    with serve(tmp_path_factory.mktemp("metrics-open")) as running:
        for who, prompt in (("alice", "acme's quarterly numbers, " * 4), ("alice", "acme's quarterly numbers, " * 4),
                            ("bob", "globex merger plan")):
            _generate(running, who, prompt)
        running.wait_idle()
        yield running


def test_an_anonymous_scrape_shows_totals_and_no_organization(keyed: RunningServer) -> None:
    r = httpx.get(keyed.base_url + "/metrics")
    assert r.status_code == 200
    anonymous = _families(r.text)
    labels = {k for samples in anonymous.values() for _, sample_labels, _ in samples for k in sample_labels}
    assert not labels & {"organization", "scope"}, f"tenant labels in an anonymous scrape: {labels}"
    assert [org for org in ORGS if org in r.text] == []
    # The totals are the per-organisation series summed: nothing lost but the split.
    full = _families(keyed.app.state.metrics.render(per_tenant=True).decode())
    for family in ("kvfence_prompt_tokens", "kvfence_generation_tokens", "kvfence_requests",
                   "kvfence_prefix_cache_hit_tokens", "kvfence_cached_prompt_tokens"):
        assert _total(anonymous, family) == _total(full, family) > 0, family
    assert {org for _, lab, _ in full["kvfence_prompt_tokens"] if (org := lab.get("organization"))} >= {"acme", "globex"}
    requests = {(lab["endpoint"], lab["status"]) for name, lab, _ in anonymous["kvfence_requests"]
                if name.endswith("_total")}
    assert requests == {("completions", "ok")}  # the other labels survive the sum
    assert "kvfence_cache_config_info" in anonymous  # what gateways and auditors read is still there


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("metrics-locked")
    key_file = tmp / "metrics.key"
    key_file.write_text(METRICS_KEY + "\n")
    with serve(tmp) as running:
        # As `kvfence serve --metrics-key-file` builds it (the wiring is tested below).
        running.app.state.serving.metrics_access = MetricsAccess(key_digest=read_metrics_key(key_file),
                                                                 tenants_authenticated=True)
        _generate(running, "carol", "initech payroll")
        running.wait_idle()
        yield running


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong-" + "k" * 32},
    {"Authorization": "Basic " + METRICS_KEY},
    "tenant",
])
def test_a_locked_metrics_endpoint_refuses_without_its_key(locked: RunningServer, headers: object) -> None:
    sent = locked.headers("carol") if headers == "tenant" else headers
    assert isinstance(sent, dict)
    r = httpx.get(locked.base_url + "/metrics", headers=sent)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    error = r.json()["error"]
    assert error["code"] == "invalid_api_key" and "metrics key" in error["message"]
    assert "initech" not in r.text and "kvfence_" not in r.text


def test_the_metrics_key_reads_the_per_organization_view(locked: RunningServer) -> None:
    r = httpx.get(locked.base_url + "/metrics", headers={"Authorization": f"Bearer {METRICS_KEY}"})
    assert r.status_code == 200
    families = _families(r.text)
    orgs = {lab["organization"] for _, lab, _ in families["kvfence_prompt_tokens"] if "organization" in lab}
    assert orgs == {"initech"}
    scopes = {lab["organization"] for _, lab, _ in families["kvfence_prefix_cache_hit_tokens"]}
    assert scopes <= {"initech"}


def test_no_auth_shows_the_full_view_and_keyed_servers_the_aggregate() -> None:
    assert MetricsAccess(key_digest=None, tenants_authenticated=False).view({"type": "http", "headers": []}) \
        is MetricsView.FULL
    assert MetricsAccess(key_digest=None, tenants_authenticated=True).view({"type": "http", "headers": []}) \
        is MetricsView.AGGREGATE


def test_the_config_option_locks_the_endpoint(tmp_path: Path) -> None:
    key_file = tmp_path / "metrics.key"
    key_file.write_text(METRICS_KEY)
    serving = OpenAIServing(ServerConfig(keys_path=tmp_path / "keys.toml", metrics_key_path=key_file),
                            ServerMetrics(), b"s" * 32)
    assert serving.metrics_access.is_locked
    ok = {"type": "http", "headers": [(b"authorization", f"Bearer {METRICS_KEY}".encode())]}
    assert serving.metrics_access.view(ok) is MetricsView.FULL


@pytest.mark.parametrize("content", ["", "short", "two words-" + "x" * 20])
def test_an_unusable_metrics_key_file_is_a_config_error(tmp_path: Path, content: str) -> None:
    key_file = tmp_path / "metrics.key"
    key_file.write_text(content)
    with pytest.raises(ConfigError, match="--metrics-key-file"):
        read_metrics_key(key_file)


def test_serve_refuses_a_weak_metrics_key_before_loading(tmp_path: Path) -> None:
    key_file = tmp_path / "metrics.key"
    key_file.write_text("short")
    env = {**os.environ, "KVFENCE_SERVER_SECRET": "ab" * 32}
    out = subprocess.run([str(Path(sys.executable).parent / "kvfence"), "serve", "--no-auth", "--port", str(free_port()),
                          "--metrics-key-file", str(key_file)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2, out.stderr
    assert "--metrics-key-file" in out.stderr and "Traceback" not in out.stderr
