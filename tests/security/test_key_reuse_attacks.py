"""A new API key that reuses a revoked key's name must not inherit its prefix cache (I5).

Under ``--cache-scope key`` the scope used to be an HMAC of organisation/workspace/key *name*. Names
are reused all the time (revoke "ci", add a new "ci" for the next team), so the new holder could
read the old holder's prompts back through the cache (cached tokens, time to first token). The
scope now derives from a key id that no other key shares. These tests failed on the name-derived
scope (the new key got 32 cached tokens of the old key's 40-token prompt).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvfence.scope import CacheScope
from kvfence.server.auth.keys import add_key, derived_key_id, hash_secret, load_keys, write_keys
from tests.server.conftest import TENANTS, RunningServer, serve

PAGE = 16
PROMPT_LEN = 40
FULL_PAGES = (PROMPT_LEN - 1) // PAGE * PAGE  # what a same-scope repeat of the prompt gets from the cache


@pytest.fixture(scope="module")
def key_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    tmp = tmp_path_factory.mktemp("key-scope")
    with serve(tmp, cache_scope=CacheScope.KEY) as running:
        yield running, tmp / "keys.toml"


def _tokens(label: str) -> list[int]:
    digest = b"".join(hashlib.sha256(f"{label}/{i}".encode()).digest() for i in range(2))
    return [5 + b % 250 for b in digest[:PROMPT_LEN]]


def _cached(server: RunningServer, secret: str, prompt: Any) -> int:
    r = httpx.post(server.base_url + "/v1/completions", timeout=60, headers={"Authorization": f"Bearer {secret}"},
                   json={"prompt": prompt, "max_tokens": 1, "temperature": 0.0})
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def _status(server: RunningServer, secret: str) -> int:
    r = httpx.post(server.base_url + "/v1/completions", json={"prompt": [7, 8], "max_tokens": 1}, timeout=60,
                   headers={"Authorization": f"Bearer {secret}"})
    return r.status_code


def _wait_for(server: RunningServer, secret: str, status: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (got := _status(server, secret)) != status:
        assert time.monotonic() < deadline, f"still {got}, expected {status}"
        time.sleep(0.2)


def test_a_new_key_with_a_revoked_keys_name_gets_none_of_its_cache(key_server: tuple[RunningServer, Path]) -> None:
    server, keys_path = key_server
    old_secret = server.keys["carol"]
    victim = _tokens("revoked carol's prompt")
    assert _cached(server, old_secret, victim) == 0
    assert _cached(server, old_secret, victim) == FULL_PAGES  # control: the key does hit its own cache

    write_keys(keys_path, [k for k in load_keys(keys_path) if k.name != "carol"])
    _wait_for(server, old_secret, 401)
    org, workspace, _ = TENANTS["carol"]
    new_secret = add_key(keys_path, organization=org, workspace=workspace, name="carol")
    _wait_for(server, new_secret, 200)

    assert _cached(server, new_secret, victim) == 0, "the new 'carol' read the revoked 'carol's prefix cache"
    assert _cached(server, new_secret, victim) == FULL_PAGES  # and its own cache works as usual


def test_rotating_a_key_by_hand_keeps_its_id_and_its_cache(key_server: tuple[RunningServer, Path]) -> None:
    """An operator who swaps a key's secret but keeps its ``id`` says "same key": the cache follows the id."""
    server, keys_path = key_server
    old_secret = server.keys["bob"]
    prompt = _tokens("bob before rotation")
    assert _cached(server, old_secret, prompt) == 0
    new_secret = "kvf-rotated-bob-" + "x" * 32
    keys = load_keys(keys_path)
    text = keys_path.read_text().replace(hash_secret(old_secret), hash_secret(new_secret))
    assert any(k.name == "bob" for k in keys)
    keys_path.write_text(text)
    _wait_for(server, new_secret, 200)
    assert _cached(server, new_secret, prompt) == FULL_PAGES


def test_a_keys_file_without_ids_still_works_and_gains_ids(tmp_path: Path) -> None:
    """Files written before key ids: each key gets an id from its own hash, written out on the next change."""
    path = tmp_path / "keys.toml"
    first, second = "a" * 64, "b" * 64
    path.write_text(
        f'[[keys]]\norganization = "acme"\nname = "ci"\nsha256 = "{first}"\n'
        f'[[keys]]\norganization = "acme"\nname = "ops"\nsha256 = "{second}"\n'
    )
    old = load_keys(path)
    assert [k.scope_id for k in old] == [derived_key_id(first), derived_key_id(second)]
    assert old[0].scope_id != old[1].scope_id
    add_key(path, organization="acme", name="new")
    text = path.read_text()
    assert f'id = "{derived_key_id(first)}"' in text and f'id = "{derived_key_id(second)}"' in text
    again = load_keys(path)
    assert [k.scope_id for k in again[:2]] == [k.scope_id for k in old]  # the migration changed no scope
    assert len({k.scope_id for k in again}) == 3


def test_two_keys_with_one_id_are_refused(tmp_path: Path) -> None:
    """A hand-edited file that gives two keys one id would merge their key scopes: invalid."""
    from kvfence.errors import ConfigError

    path = tmp_path / "keys.toml"
    path.write_text(
        f'[[keys]]\norganization = "acme"\nname = "ci"\nid = "k-1"\nsha256 = "{"a" * 64}"\n'
        f'[[keys]]\norganization = "globex"\nname = "ci"\nid = "k-1"\nsha256 = "{"b" * 64}"\n'
    )
    with pytest.raises(ConfigError, match="appears twice"):
        load_keys(path)
