"""A model directory with a config and weights but no tokenizer: a clear error everywhere, naming the
missing file and what to copy or convert; never a server that answers with empty texts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvfence.cli import main
from kvfence.engine.llm import LLM
from kvfence.errors import ModelLoadError
from tests.engine.tiny_models import build_tiny_model


@pytest.fixture(scope="module")
def weights_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model_dir = build_tiny_model(tmp_path_factory.mktemp("weights-only") / "m", "llama")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model_dir / name).unlink()
    return model_dir


def test_llm_names_the_missing_file_and_the_fix(weights_only: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"no tokenizer\.json: .*no tokenizer at all: copy tokenizer\.json "
                       r"and tokenizer_config\.json .*skip_tokenizer_init"):
        LLM(model=str(weights_only), kv_cache_tokens=256, device="cpu")


def test_a_slow_tokenizer_is_named_with_how_to_convert_it(weights_only: Path, tmp_path: Path) -> None:
    model_dir = Path(shutil.copytree(weights_only, tmp_path / "slow"))
    (model_dir / "tokenizer.model").write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match=r"it has tokenizer\.model, which kvfence does not read: .*save_pretrained"):
        LLM(model=str(model_dir), kv_cache_tokens=256, device="cpu")


@pytest.mark.parametrize("command", ["generate", "serve"])
def test_cli_exits_2_with_the_message(
    command: str, weights_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [command, "--model", str(weights_only), "--kv-cache-tokens", "256", "--device", "cpu"]
    args += ["--prompt", "hi"] if command == "generate" else ["--port", "0", "--no-auth"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "has no tokenizer.json" in err and "tokenizer_config.json" in err
