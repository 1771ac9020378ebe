"""Start a prefill worker as a child process (``kvfence disagg prefill-worker``) and stop it again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

from kvfence.disagg.config import KEY_ENV
from kvfence.engine.config import EngineConfig
from kvfence.errors import CapacityError, ConfigError, KvfenceError

__all__ = ["KEY_ENV", "WorkerProcess", "engine_config_args"]



def engine_config_args(config: EngineConfig) -> list[str]:
    """Command-line flags of ``kvfence disagg prefill-worker`` that reproduce ``config``."""
    args: list[str] = []
    if config.model is not None:
        args += ["--model", str(config.model)]
    if config.max_model_len is not None:
        args += ["--max-model-len", str(config.max_model_len)]
    if config.kv_cache_tokens is not None:
        args += ["--kv-cache-tokens", str(config.kv_cache_tokens)]
    if config.kv_cache_memory is not None:
        args += ["--kv-cache-memory", str(config.kv_cache_memory)]
    args += [
        "--page-size", str(config.page_size), "--dtype", config.dtype, "--kv-cache-dtype", config.kv_cache_dtype,
        "--device", config.device, "--runtime", config.runtime,
        "--max-num-seqs", str(config.max_num_seqs), "--max-num-batched-tokens", str(config.max_num_batched_tokens),
        "--max-prefill-chunk", str(config.max_prefill_chunk), "--seed", str(config.seed),
    ]
    if config.num_threads is not None:
        args += ["--num-threads", str(config.num_threads)]
    if not config.scrub:
        args.append("--unsafe-no-scrub")
    return args


class WorkerProcess:
    """A prefill worker child listening on a private ``ipc://`` socket (directory mode 0700)."""

    def __init__(self, config: EngineConfig, *, key: bytes, startup_timeout_s: float) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="kvfence-disagg-"))
        os.chmod(self._dir, 0o700)
        self.log_path = self._dir / "prefill-worker.log"
        ready = self._dir / "ready"
        cmd = [
            sys.executable, "-m", "kvfence.disagg.cli", "prefill-worker",
            "--listen", f"ipc://{self._dir}/prefill.sock", "--ready-file", str(ready), "--parent-pid", str(os.getpid()),
            *engine_config_args(config),
        ]
        env = {**os.environ, KEY_ENV: key.hex()}
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
            )
        self._finalizer = weakref.finalize(self, _stop, self.proc, self._dir)
        deadline = time.monotonic() + startup_timeout_s
        while not ready.is_file():
            code = self.proc.poll()
            if code is not None:
                tail = self.log_tail()
                self.close()
                error = CapacityError if code == CapacityError.exit_code else KvfenceError
                raise error(f"the prefill worker exited with code {code} while starting:\n{tail}")
            if time.monotonic() > deadline:
                self.close()
                raise ConfigError(f"the prefill worker did not start within {startup_timeout_s:.0f} s")
            time.sleep(0.05)
        self.endpoint = ready.read_text(encoding="utf-8").strip()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        self._finalizer()


def _stop(proc: subprocess.Popen[bytes], directory: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(directory, ignore_errors=True)
