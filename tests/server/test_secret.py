"""The server secret that keys cache scopes (I5)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kvfence.errors import ConfigError
from kvfence.server.auth.secret import SECRET_ENV_VAR, load_server_secret


def test_generated_once_with_owner_only_permissions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV_VAR, raising=False)
    path = tmp_path / "sub" / "secret"
    first = load_server_secret(path)
    assert len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_server_secret(path) == first


def test_env_var_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV_VAR, "ab" * 32)
    assert load_server_secret(tmp_path / "unused") == bytes.fromhex("ab" * 32)
    assert not (tmp_path / "unused").exists()


def test_short_secret_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV_VAR, "short")
    with pytest.raises(ConfigError, match="too short"):
        load_server_secret()


def test_world_readable_file_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV_VAR, raising=False)
    path = tmp_path / "secret"
    path.write_text("cd" * 32)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_server_secret(path)
