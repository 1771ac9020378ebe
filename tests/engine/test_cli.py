"""``kvfence generate`` through the real CLI entry point."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from kvfence.cli import main
from kvfence.engine.cli_options import parse_dtype
from kvfence.engine.config import EngineConfig
from kvfence.engine.runner import dtype_names
from kvfence.errors import ConfigError


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
        (["--max-tokens", "-1"], "max_tokens must be"),  # 0 is valid: the prompt only
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


@pytest.mark.parametrize(("spelling", "name"), [("half", "float16"), ("FP16", "float16"), ("bf16", "bfloat16"),
                                                ("float", "float32"), ("fp32", "float32"), ("bfloat16", "bfloat16")])
def test_dtype_spellings_of_vllm_and_torch(spelling: str, name: str) -> None:
    assert parse_dtype(spelling, None, "cpu") == name


def test_dtype_auto_is_float32_on_cpu_and_the_checkpoints_on_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "dtype": "bfloat16"}))
    assert parse_dtype("auto", model, "cpu") == "float32"
    assert parse_dtype("auto", model, "cuda:0") == "bfloat16"
    monkeypatch.setattr(dtype_names, "_cuda_available", lambda: False)
    assert parse_dtype("auto", model, "auto") == "float32"
    (model / "config.json").write_text((model / "config.json").read_text().replace("bfloat16", "float32"))
    assert parse_dtype("auto", model, "cuda") == "float32"


def test_generate_accepts_vllm_dtype_spellings(default_model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kvfence.engine.core.engine_core")
    for dtype in ("auto", "FLOAT"):
        caplog.clear()
        main(["generate", "--model", str(default_model_dir), "--prompt", "Hello", "--max-tokens", "2", "--dtype", dtype,
              "--max-model-len", "auto", "--kv-cache-tokens", "1024", "--device", "cpu"])
        assert "dtype=float32" in caplog.text


def test_python_api_takes_the_same_dtype_spellings() -> None:
    assert EngineConfig(dtype="half").dtype == "float16"  # type: ignore[arg-type]
    assert EngineConfig(dtype="auto", device="cpu").dtype == "float32"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dtype must be one of"):
        EngineConfig(dtype="int8")  # type: ignore[arg-type]


@pytest.mark.parametrize(("spelling", "name"), [("bf16", "bfloat16"), ("half", "float16"), ("auto", "float32")])
def test_generate_takes_a_kv_cache_dtype(default_model_dir: Path, caplog: pytest.LogCaptureFixture,
                                         capsys: pytest.CaptureFixture[str], spelling: str, name: str) -> None:
    caplog.set_level(logging.INFO, logger="kvfence.engine.core.engine_core")
    main(["generate", "--model", str(default_model_dir), "--prompt", "Hello", "--max-tokens", "3",
          "--kv-cache-dtype", spelling, "--max-model-len", "auto", "--kv-cache-tokens", "1024", "--device", "cpu"])
    assert f"kv_cache_dtype={name}" in caplog.text and "dtype=float32" in caplog.text
    assert "finish_reason=" in capsys.readouterr().err


def test_generate_refuses_an_unknown_kv_cache_dtype(default_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["generate", "--model", str(default_model_dir), "--prompt", "x", "--kv-cache-dtype", "fp8"])
    assert info.value.code == 2 and "--kv-cache-dtype" in capsys.readouterr().err


@pytest.mark.parametrize(("device", "cuda_devices", "message"), [
    ("cuda", 0, "no CUDA device is available"),
    ("cuda:3", 2, "has 2 CUDA device(s)"),
    ("cuda:x", 1, "device must be 'auto', 'cpu' or 'cuda[:N]'"),
])
def test_generate_on_a_cuda_device_this_machine_lacks_is_a_clean_error(
    default_model_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    device: str, cuda_devices: int, message: str,
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_devices > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda_devices)
    with pytest.raises(SystemExit) as info:
        main(["generate", "--model", str(default_model_dir), "--prompt", "x", "--device", device])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and "Traceback" not in err
