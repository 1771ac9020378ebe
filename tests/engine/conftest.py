"""Engine fixtures: the built-in random model, built once per session into a temporary directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvfence.engine.kernels import reset_kernels
from kvfence.engine.runner.default_model import ensure_default_model


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_default_model(tmp_path_factory.mktemp("kvfence-home") / "builtin")


@pytest.fixture
def fresh_kernels(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The CPU kernels decided again under the test's environment, and again after it (the real one)."""
    reset_kernels()
    yield monkeypatch
    monkeypatch.undo()
    reset_kernels()
