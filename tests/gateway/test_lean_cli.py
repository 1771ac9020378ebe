"""`kvfence gateway --server` and $KVFENCE_GATEWAY_SERVER: which HTTP server runs the gateway."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kvfence.errors import ConfigError
from kvfence.gateway.cli import SERVER_ENV, gateway


def test_an_unknown_server_in_the_environment_is_refused_naming_the_variable(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("{}")
    result = CliRunner().invoke(gateway, ["--config", str(config)], env={SERVER_ENV: "gunicorn"})
    assert isinstance(result.exception, ConfigError)
    assert SERVER_ENV in str(result.exception) and "lean" in str(result.exception)


def test_an_unknown_server_option_is_a_usage_error() -> None:
    result = CliRunner().invoke(gateway, ["--server", "gunicorn", "--config", "x.yaml"])
    assert result.exit_code == 2 and "lean" in result.output and "uvicorn" in result.output
