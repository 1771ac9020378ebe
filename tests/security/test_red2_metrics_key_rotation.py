"""A rotated ``--metrics-key-file`` takes effect without a restart, and the old key stops working.

Before: the file was read once at start, so after a rotation (the old token leaked, say) the old
key kept reading the per-organisation view until somebody restarted the server; these tests failed
on that code (the old key still got a 200, the new one a 401). Now the file is re-read when it
changes; a changed file that is missing or invalid locks the endpoint rather than reviving the old key.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kvfence.server.auth.metrics_access import MetricsAccess, MetricsKeyFile, MetricsView
from kvfence.server.config import ServerConfig
from kvfence.server.metrics import ServerMetrics
from kvfence.server.openai.serving import OpenAIServing
from tests.server.conftest import RunningServer, serve

OLD_KEY = "old-metrics-" + "a" * 32
NEW_KEY = "new-metrics-" + "b" * 40


def _scope(token: str) -> dict[str, object]:
    return {"type": "http", "headers": [(b"authorization", f"Bearer {token}".encode())]}


def _serving(key_file: Path, tmp_path: Path) -> OpenAIServing:
    return OpenAIServing(ServerConfig(keys_path=tmp_path / "keys.toml", metrics_key_path=key_file),
                         ServerMetrics(), b"s" * 32)


def _rotate_atomically(key_file: Path, token: str) -> None:
    staged = key_file.with_suffix(".new")
    staged.write_text(token + "\n")
    os.replace(staged, key_file)  # what `mv`, Kubernetes secrets and most rotation tools do


def test_an_atomic_rotation_is_in_force_at_the_next_request(tmp_path: Path) -> None:
    key_file = tmp_path / "metrics.key"
    key_file.write_text(OLD_KEY)
    access = _serving(key_file, tmp_path).metrics_access
    assert access.view(_scope(OLD_KEY)) is MetricsView.FULL
    _rotate_atomically(key_file, NEW_KEY)
    assert access.view(_scope(NEW_KEY)) is MetricsView.FULL
    refused = access.view(_scope(OLD_KEY))
    assert not isinstance(refused, MetricsView) and refused.status_code == 401


def test_an_in_place_rewrite_is_in_force_at_the_next_request(tmp_path: Path) -> None:
    key_file = tmp_path / "metrics.key"
    key_file.write_text(OLD_KEY)
    access = _serving(key_file, tmp_path).metrics_access
    assert access.view(_scope(OLD_KEY)) is MetricsView.FULL
    key_file.write_text(NEW_KEY)  # same inode, new size
    assert not isinstance(access.view(_scope(OLD_KEY)), MetricsView)
    assert access.view(_scope(NEW_KEY)) is MetricsView.FULL


@pytest.mark.parametrize("breakage", ["removed", "weak", "empty"])
def test_a_broken_rotation_locks_the_endpoint_instead_of_reviving_the_old_key(tmp_path: Path, breakage: str) -> None:
    key_file = tmp_path / "metrics.key"
    key_file.write_text(OLD_KEY)
    key = MetricsKeyFile(key_file)
    access = MetricsAccess(key_file=key, tenants_authenticated=True)
    assert access.view(_scope(OLD_KEY)) is MetricsView.FULL
    if breakage == "removed":
        key_file.unlink()
    else:
        key_file.write_text("short" if breakage == "weak" else "")
    for token in (OLD_KEY, NEW_KEY, "short"):
        assert not isinstance(access.view(_scope(token)), MetricsView), token
    _rotate_atomically(key_file, NEW_KEY)  # fixed: the new key works, the old one stays refused
    assert access.view(_scope(NEW_KEY)) is MetricsView.FULL
    assert not isinstance(access.view(_scope(OLD_KEY)), MetricsView)


def test_an_unchanged_file_is_not_read_on_every_scrape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "metrics.key"
    key_file.write_text(OLD_KEY)
    key = MetricsKeyFile(key_file)
    reads: list[Path] = []
    real_read = Path.read_text

    def counting_read(self: Path, *args: object, **kwargs: object) -> str:
        reads.append(self)
        return real_read(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counting_read)
    for _ in range(50):
        assert key.digest() is not None
    assert len(reads) <= 1  # at most the once-a-second re-read


@pytest.fixture(scope="module")
def rotating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    tmp = tmp_path_factory.mktemp("metrics-rotation")
    key_file = tmp / "metrics.key"
    key_file.write_text(OLD_KEY)
    with serve(tmp) as running:
        # As `kvfence serve --metrics-key-file` builds it (OpenAIServing, tested above).
        running.app.state.serving.metrics_access = MetricsAccess(key_file=MetricsKeyFile(key_file),
                                                                 tenants_authenticated=True)
        yield running, key_file


def test_rotation_through_http(rotating: tuple[RunningServer, Path]) -> None:
    server, key_file = rotating

    def scrape(token: str) -> httpx.Response:
        return httpx.get(server.base_url + "/metrics", headers={"Authorization": f"Bearer {token}"})

    assert scrape(OLD_KEY).status_code == 200
    _rotate_atomically(key_file, NEW_KEY)
    old = scrape(OLD_KEY)
    assert old.status_code == 401 and "kvfence_" not in old.text
    assert old.json()["error"]["code"] == "invalid_api_key"
    assert scrape(NEW_KEY).status_code == 200
