"""`kvfence keys` through click's runner: the secret is printed once and works for lookup."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kvfence.cli import main
from kvfence.server.auth.keys import KeyRing
from kvfence.server.cli import keys, parse_size


def test_add_list_revoke(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    runner = CliRunner()
    result = runner.invoke(keys, ["add", "--file", str(path), "--org", "acme", "--workspace", "lab",
                                  "--name", "alice", "--max-concurrent-requests", "2"])
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip().splitlines()[-1]
    assert secret.startswith("kvf-") and secret not in path.read_text()
    key = KeyRing(path).lookup(secret)
    assert key is not None and key.workspace == "lab" and key.max_concurrent_requests == 2

    listed = runner.invoke(keys, ["list", "--file", str(path)])
    assert "acme/lab/alice" in listed.stdout and secret not in listed.stdout

    again = runner.invoke(keys, ["add", "--file", str(path), "--org", "acme", "--workspace", "lab", "--name", "alice"])
    assert again.exit_code != 0

    revoked = runner.invoke(keys, ["revoke", "--file", str(path), "--org", "acme", "--workspace", "lab",
                                   "--name", "alice"])
    assert revoked.exit_code == 0
    assert KeyRing(path).lookup(secret) is None


def test_parse_size() -> None:
    assert parse_size("4GiB") == 4 << 30
    assert parse_size("512MB") == 512_000_000
    assert parse_size("2G") == 2 << 30
    assert parse_size("1024") == 1024


def test_listing_a_keys_file_that_does_not_exist_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["keys", "list", "--file", str(tmp_path / "kyes.toml")])
    assert info.value.code == 2 and "no keys file at" in capsys.readouterr().err
