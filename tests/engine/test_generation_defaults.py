"""Sampling defaults read from a checkpoint's generation_config.json (vLLM's --generation-config auto)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from kvfence.engine.sampling.generation_defaults import read_sampling_defaults


def _write(tmp_path: Path, body: object) -> Path:
    (tmp_path / "generation_config.json").write_text(json.dumps(body))
    return tmp_path


def test_instruct_model_defaults_are_read(tmp_path: Path) -> None:
    qwen = {"bos_token_id": 1, "eos_token_id": [2, 3], "do_sample": True, "temperature": 0.7, "top_p": 0.8,
            "top_k": 20, "repetition_penalty": 1.05, "max_new_tokens": 2048}
    assert read_sampling_defaults(_write(tmp_path, qwen)) == {
        "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}


def test_no_file_no_fields_or_off_values_give_nothing(tmp_path: Path) -> None:
    assert read_sampling_defaults(tmp_path) == {}
    assert read_sampling_defaults(_write(tmp_path, {"bos_token_id": 1, "eos_token_id": 2})) == {}
    assert read_sampling_defaults(_write(tmp_path, {"top_k": 0, "temperature": None})) == {}
    assert read_sampling_defaults(_write(tmp_path, [1, 2])) == {}


def test_values_outside_the_api_range_are_ignored_with_a_warning(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    body = {"temperature": 5.0, "top_p": 0.0, "min_p": True, "repetition_penalty": "1.1", "top_k": 40}
    assert read_sampling_defaults(_write(tmp_path, body)) == {"top_k": 40}
    assert caplog.text.count("ignoring") == 4 and all(r.levelno == logging.WARNING for r in caplog.records)
    (tmp_path / "generation_config.json").write_text("{not json")
    assert read_sampling_defaults(tmp_path) == {}
