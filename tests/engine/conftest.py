"""Engine fixtures: the built-in random model, built once per session into a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfence.engine.default_model import ensure_default_model


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_default_model(tmp_path_factory.mktemp("kvfence-home") / "builtin")
