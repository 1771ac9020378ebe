"""``kvfence generate`` with the penalty, bias, min_p and n options."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfence.cli import main

BASE = ["--max-model-len", "auto", "--kv-cache-tokens", "1024", "--device", "cpu"]


def test_help_lists_the_sampling_options(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        main(["generate", "--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    for option in ("--presence-penalty", "--frequency-penalty", "--repetition-penalty", "--min-p", "--logit-bias",
                   "--n"):
        assert option in out


def test_logit_bias_and_n_change_the_output(default_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["generate", "--model", str(default_model_dir), "--prompt", "Hello", "--max-tokens", "4",
          "--logit-bias", f"{ord('z') + 3}=100", "--frequency-penalty", "0.5", *BASE])
    captured = capsys.readouterr()
    assert "finish_reason" in captured.err
    forced = captured.out.strip()
    main(["generate", "--model", str(default_model_dir), "--prompt", "Hello", "--max-tokens", "4",
          "-n", "3", "--temperature", "1", "--seed", "4", "--min-p", "0.01", "--repetition-penalty", "1.2", *BASE])
    out = capsys.readouterr().out
    assert [f"--- choice {i}" in out for i in range(3)] == [True] * 3
    assert len(forced) == 4 and len(set(forced)) == 1  # one token, four times


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--presence-penalty", "3"], "presence_penalty must be"),
        (["--repetition-penalty", "0"], "repetition_penalty must be"),
        (["--logit-bias", "nonsense"], "TOKEN_ID=BIAS"),
        (["--logit-bias", "999999=1"], "logit_bias token id 999999"),
        (["-n", "0"], "n must be"),
    ],
)
def test_bad_sampling_options_exit_cleanly(
    default_model_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["generate", "--model", str(default_model_dir), "--prompt", "x", *BASE, *args])
    assert info.value.code != 0
    assert message in capsys.readouterr().err
