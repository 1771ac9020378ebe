"""The HTTP limits as settings: validated once with an error that says what to change, and not
silently ignored by a policy reload (the server takes them when it starts listening)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kvfence.errors import ConfigError
from kvfence.gateway.cli import http_config
from kvfence.gateway.policy.loader import parse_policy
from kvfence.gateway.reload import restart_only_changes
from kvfence.http.server import HttpConfig
from kvfence.server.cli import serve
from tests.gateway.test_policy import GOOD


@pytest.mark.parametrize(("field", "value", "words"), [
    ("head_timeout_s", 0.0, "head-timeout"),
    ("body_timeout_s", -1.0, "body-timeout"),
    ("idle_timeout_s", 0.0, "idle-timeout"),
    ("max_head_bytes", 100, "max-head-bytes"),
    ("max_headers", 2, "max-headers"),
    ("max_body_bytes", 10, "max-body-bytes"),
])
def test_a_limit_out_of_range_is_a_config_error_naming_it(field: str, value: float, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        HttpConfig(**{field: value})


def test_the_gateway_takes_its_limits_from_the_policy() -> None:
    policy = parse_policy(GOOD.replace("gateway:\n", "gateway:\n  max_body_bytes: 4096\n"
                                       "  http: {head_timeout_s: 2.5, max_headers: 20}\n", 1))
    config = http_config(policy.gateway, graceful_timeout=7.0)
    assert (config.head_timeout_s, config.max_headers, config.max_body_bytes) == (2.5, 20, 4096)
    assert (config.body_timeout_s, config.idle_timeout_s, config.max_head_bytes) == (30.0, 15.0, 64 * 1024)
    assert config.graceful_timeout_s == 7.0


@pytest.mark.parametrize("edit", [
    "  http: {head_timeout_s: 2.5}\n",
    "  max_body_bytes: 4096\n",
    "  metrics_key_file: metrics.key\n",
])
def test_a_reload_that_changes_a_limit_is_refused_as_restart_only(edit: str) -> None:
    old = parse_policy(GOOD)
    new = parse_policy(GOOD.replace("gateway:\n", "gateway:\n" + edit, 1))
    assert restart_only_changes(old, new) == ["gateway." + edit.strip().split(":")[0]]


def test_serve_refuses_a_zero_timeout_as_a_usage_error() -> None:
    result = CliRunner().invoke(serve, ["--no-auth", "--head-timeout", "0"])
    assert result.exit_code == 2 and "--head-timeout" in result.output
