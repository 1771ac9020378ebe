"""``kvfence generate --generation-config``: the model's sampling defaults fill the options left out,
as in ``kvfence serve`` and vLLM; ``vllm`` turns them off; an option given always wins."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvfence.cli import main

BASE = ["--prompt", "Hello", "--max-tokens", "16", "--seed", "3", "--max-model-len", "256",
        "--kv-cache-tokens", "1024", "--device", "cpu"]


@pytest.fixture(scope="module")
def hot_model(default_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in model whose generation_config.json asks for temperature 2: far from greedy."""
    out = tmp_path_factory.mktemp("hot") / "model"
    shutil.copytree(default_model_dir, out)
    config = json.loads((out / "generation_config.json").read_text())
    (out / "generation_config.json").write_text(json.dumps({**config, "temperature": 2.0, "top_p": 1.0}))
    return out


def _run(capsys: pytest.CaptureFixture[str], model: Path, *args: str) -> str:
    main(["generate", "--model", str(model), *BASE, *args])
    return capsys.readouterr().out


def test_models_defaults_apply_unless_turned_off_or_overridden(hot_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    greedy = _run(capsys, hot_model, "--temperature", "0")
    assert _run(capsys, hot_model, "--generation-config", "vllm") == greedy  # generate's own default: greedy
    assert _run(capsys, hot_model) != greedy  # auto (the default): temperature 2 from the file
    assert _run(capsys, hot_model, "--generation-config", "auto", "--temperature", "0") == greedy


@pytest.mark.slow
def test_a_directory_names_another_generation_config(
    hot_model: Path, default_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    greedy = _run(capsys, default_model_dir)  # the built-in file sets no sampling fields
    assert _run(capsys, default_model_dir, "--generation-config", str(hot_model)) != greedy


def test_a_bad_value_exits_cleanly(default_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["generate", "--model", str(default_model_dir), *BASE, "--generation-config", "hf"])
    err = capsys.readouterr().err
    assert "generation_config must be 'auto', 'vllm' or a directory" in err and "Traceback" not in err
    assert info.value.code in (1, 2)
