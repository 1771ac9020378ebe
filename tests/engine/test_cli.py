"""``kvfence generate`` through the real CLI entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfence.cli import main


def test_generate_prints_a_completion(default_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["generate", "--model", str(default_model_dir), "--prompt", "Hello", "--max-tokens", "5",
          "--max-model-len", "auto", "--kv-cache-tokens", "1024", "--device", "cpu"])
    captured = capsys.readouterr()
    assert "RANDOM WEIGHTS" in captured.err
    assert "finish_reason=" in captured.err and "prompt=6 tokens" in captured.err


def test_generate_chat_and_batch(default_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["generate", "--model", str(default_model_dir), "--prompt", "a", "--prompt", "b", "--chat",
          "--max-tokens", "3", "--temperature", "0.7", "--seed", "1", "--max-model-len", "512",
          "--kv-cache-tokens", "1024", "--device", "cpu"])
    out = capsys.readouterr().out
    assert out.count("--- prompt:") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kv-cache-tokens", "256"], "KV pool holds only 256"),
        (["--max-model-len", "lots"], "--max-model-len must be"),
        (["--max-tokens", "0"], "max_tokens must be"),
    ],
)
def test_generate_errors_exit_cleanly(
    default_model_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["generate", "--model", str(default_model_dir), "--prompt", "x", "--device", "cpu", *args])
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert info.value.code in (1, 2)
