"""`kvfence serve` as a user runs it: a subprocess, its start-up line, its exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.netutil import free_port

KVFENCE = [str(Path(sys.executable).parent / "kvfence")]


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["KVFENCE_SERVER_SECRET"] = "ab" * 32
    return env


def test_help_explains_the_options() -> None:
    out = subprocess.run([*KVFENCE, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for option in ("--model", "--host", "--port", "--keys", "--cache-scope", "--max-model-len", "--kv-cache-tokens",
                   "--kv-cache-memory", "--no-auth", "--verify-isolation", "--num-threads", "--disagg"):
        assert option in out.stdout


def test_refuses_to_start_without_keys_or_no_auth(tmp_path: Path) -> None:
    out = subprocess.run([*KVFENCE, "serve", "--port", str(free_port())], capture_output=True, text=True,
                         timeout=60, env=_env(tmp_path))
    assert out.returncode == 2
    assert "--keys" in out.stderr and "Traceback" not in out.stderr


def test_bad_thread_count_is_a_clear_config_error(tmp_path: Path) -> None:
    out = subprocess.run([*KVFENCE, "serve", "--no-auth", "--port", str(free_port()), "--num-threads", "0"],
                         capture_output=True, text=True, timeout=60, env=_env(tmp_path))
    assert out.returncode == 2
    assert "num_threads" in out.stderr and "Traceback" not in out.stderr


def test_refuses_a_context_larger_than_the_pool(tmp_path: Path) -> None:
    """I3 at start-up: advertised context > KV pool is a refusal with both numbers, exit code 2."""
    out = subprocess.run(
        [*KVFENCE, "serve", "--no-auth", "--port", str(free_port()), "--max-model-len", "4096",
         "--kv-cache-tokens", "1024", "--device", "cpu"],
        capture_output=True, text=True, timeout=120, env=_env(tmp_path),
    )
    assert out.returncode == 2, out.stderr
    assert "4096" in out.stderr and "1024" in out.stderr
    assert "Traceback" not in out.stderr


def test_start_up_line_and_serving(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [*KVFENCE, "serve", "--no-auth", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "auto",
             "--kv-cache-tokens", "2048", "--device", "cpu", "--cache-scope", "workspace"],
            stdout=sink, stderr=subprocess.STDOUT, env=_env(tmp_path),
        )
    try:
        deadline = time.monotonic() + 120
        while "kvfence serve: model=" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        line = next(x for x in log.read_text().splitlines() if "kvfence serve: model=" in x)
        assert "RANDOM WEIGHTS" in line
        assert "KV pool=2048 tokens" in line
        assert "advertised max context=2048 tokens" in line  # 'auto' lowered it to the pool
        assert "cache scope=workspace" in line and "scrubbing=on" in line
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=60)
        assert r.status_code == 200, r.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_port_in_use_is_one_error_line_with_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([*KVFENCE, "serve", "--no-auth", "--port", str(port)], capture_output=True, text=True,
                             timeout=60, env=_env(tmp_path))
    assert out.returncode == 2, out.stderr
    assert f"cannot listen on 127.0.0.1:{port}: the address is already in use" in out.stderr
    assert "listening on" not in out.stderr and "Traceback" not in out.stderr
