"""Typed configuration of disaggregated serving: validated once, with messages that say what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfence.disagg.cli import _engine_config, prefill_worker
from kvfence.disagg.config import KEY_ENV, DisaggConfig, read_handoff_key
from kvfence.disagg.spawn import engine_config_args
from kvfence.engine.config import EngineConfig
from kvfence.errors import ConfigError


def test_spawn_arguments_reproduce_the_engine_config() -> None:
    for cfg in (
        EngineConfig(),
        EngineConfig(model="/models/x", max_model_len="auto", kv_cache_memory=1 << 30, page_size=32,
                     dtype="bfloat16", device="cuda:1", max_num_seqs=8, max_num_batched_tokens=4096,
                     max_prefill_chunk=256, seed=9, num_threads=3, scrub=False),
        EngineConfig(max_model_len=777, kv_cache_tokens=4096),
        EngineConfig(kv_cache_dtype="bfloat16"),
    ):
        ctx = prefill_worker.make_context("prefill-worker", engine_config_args(cfg))
        assert _engine_config(ctx.params) == cfg


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prefill_address": "http://127.0.0.1:1"}, "tcp://"),
        ({"prefill_address": "tcp://127.0.0.1:1", "prefill": EngineConfig()}, "either"),
        ({"handoff_key": b"k" * 65}, "at most 64"),
        ({"handoff_timeout_s": 0}, "handoff_timeout_s"),
        ({"connect_timeout_s": True}, "connect_timeout_s"),
        ({"prefill": EngineConfig(page_size=8)}, "page_size"),
        ({"prefill": EngineConfig(kv_cache_dtype="float16")}, "kv_cache_dtype"),
        ({"prefill": EngineConfig(model="/other")}, "same model"),
    ],
)
def test_disagg_config_rejects(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DisaggConfig(engine=EngineConfig(), **kwargs)  # type: ignore[arg-type]


def test_handoff_key_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert read_handoff_key(None) == b""
    monkeypatch.setenv(KEY_ENV, "00ff")
    assert read_handoff_key(None) == b"\x00\xff"
    f = tmp_path / "key.hex"
    f.write_text("ab" * 32 + "\n")
    assert read_handoff_key(f) == b"\xab" * 32
    f.write_text("not hex")
    with pytest.raises(ConfigError, match="hex"):
        read_handoff_key(f)
    f.write_text("ab" * 65)
    with pytest.raises(ConfigError, match="at most 64"):
        read_handoff_key(f)
    with pytest.raises(ConfigError, match="cannot read"):
        read_handoff_key(tmp_path / "missing")


def test_a_prefill_worker_on_a_port_in_use_is_one_error_line_with_exit_2(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    from kvfence.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as info:
            main(["disagg", "prefill-worker", "--listen", f"tcp://127.0.0.1:{port}", "--model", str(model_dir),
                  "--kv-cache-tokens", "1024", "--max-model-len", "auto", "--device", "cpu", "--log-level", "error"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"cannot listen on tcp://127.0.0.1:{port}" in err and "Traceback" not in err
