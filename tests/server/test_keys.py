"""The keys file: hashes only, validation with clear messages, hot reload."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from kvfence.errors import ConfigError
from kvfence.server.auth.keys import KeyRing, add_key, hash_secret, load_keys, write_keys


def test_add_key_stores_only_the_hash(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    secret = add_key(path, organization="acme", workspace="research", name="alice",
                     max_concurrent_requests=3, max_prompt_tokens=100)
    text = path.read_text()
    assert secret not in text
    assert hash_secret(secret) in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    [key] = load_keys(path)
    assert (key.organization, key.workspace, key.name) == ("acme", "research", "alice")
    assert key.max_concurrent_requests == 3 and key.max_prompt_tokens == 100


def test_two_keys_get_different_secrets_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    a = add_key(path, organization="Acme Corp", name="a")
    b = add_key(path, organization="bücher \"quoted\"", name="b")
    assert a != b and a.startswith("kvf-")
    keys = load_keys(path)
    assert [k.organization for k in keys] == ["Acme Corp", "bücher \"quoted\""]
    write_keys(path, keys)
    assert load_keys(path) == keys


def test_duplicate_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    add_key(path, organization="acme", name="alice")
    with pytest.raises(ConfigError, match="already exists"):
        add_key(path, organization="acme", name="alice")
    add_key(path, organization="other", name="alice")  # same name in another org is fine


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("keys = 3", "array of tables"),
        ("[[keys]]\norganization='a'\nname='b'\nsha256='abc'", "64 lower-case hex"),
        ("[[keys]]\nname='b'\nsha256='" + "a" * 64 + "'", "organization"),
        ("[[keys]]\norganization='a'\nname='b'\nsecret='x'\nsha256='" + "a" * 64 + "'", "unknown field"),
        ("[[keys]]\norganization='a'\nname='b'\nmax_prompt_tokens=0\nsha256='" + "a" * 64 + "'", "positive"),
        ("[[keys]\n", "not valid TOML"),
        ("[[keys]]\norganization='a'\nname='b'\nsha256='" + "a" * 64 + "'\n"
         "[[keys]]\norganization='c'\nname='d'\nsha256='" + "a" * 64 + "'", "twice"),
    ],
)
def test_invalid_files_say_what_is_wrong(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_keys(path)


def test_keyring_looks_up_by_secret_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    first = add_key(path, organization="acme", name="alice")
    ring = KeyRing(path, reload_interval=0.0)
    found = ring.lookup(first)
    assert found is not None and found.identity.organization == "acme"
    assert ring.lookup(first + "x") is None
    assert ring.lookup(hash_secret(first)) is None  # the stored hash is not a key
    time.sleep(0.01)
    second = add_key(path, organization="globex", name="bob")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    found = ring.lookup(second)
    assert found is not None and found.organization == "globex"


def test_keyring_keeps_last_good_keys_when_file_breaks(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    secret = add_key(path, organization="acme", name="alice")
    ring = KeyRing(path, reload_interval=0.0)
    path.write_text("this is [not toml")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2_000_000))
    assert ring.lookup(secret) is not None


def test_other_spellings_are_read(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    digest = hash_secret("kvf-x")
    path.write_text(f"""
[keys.alice]
org = "acme"
workspace = "w"
hash = "sha256:{digest.upper()}"
max_concurrent_requests = 2
""")
    [key] = load_keys(path)
    assert (key.organization, key.workspace, key.name, key.sha256) == ("acme", "w", "alice", digest)
    assert KeyRing(path).lookup("kvf-x") == key
