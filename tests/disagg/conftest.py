"""Disaggregation fixtures: a tiny model, a real prefill worker process on 127.0.0.1, a ZeroMQ MITM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvfence.disagg.spawn import KEY_ENV
from kvfence.engine.runner.default_model import ensure_default_model
from tests.disagg.helpers import KEY
from tests.disagg.mitm import Mitm
from tests.netutil import free_port

WORKER_KV_TOKENS = 1024
WORKER_MAX_MODEL_LEN = 512


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_default_model(tmp_path_factory.mktemp("disagg-home") / "builtin")


class WorkerHandle:
    def __init__(self, proc: subprocess.Popen[bytes], address: str, log: Path) -> None:
        self.proc, self.address, self.log = proc, address, log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_worker(model_dir: Path, tmp: Path, *extra: str, listen: str | None = None) -> WorkerHandle:
    """``kvfence disagg prefill-worker`` as a real process on a loopback TCP port."""
    tmp.mkdir(parents=True, exist_ok=True)
    ready, log = tmp / "ready", tmp / "worker.log"
    cmd = [
        sys.executable, "-m", "kvfence.disagg.cli", "prefill-worker",
        "--listen", listen or f"tcp://127.0.0.1:{free_port()}", "--ready-file", str(ready),
        "--model", str(model_dir), "--kv-cache-tokens", str(WORKER_KV_TOKENS),
        "--max-model-len", str(WORKER_MAX_MODEL_LEN), "--num-threads", "1", *extra,
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env={**os.environ, KEY_ENV: KEY.hex()}, stdout=out, stderr=subprocess.STDOUT)
    handle = WorkerHandle(proc, "", log)
    deadline = time.monotonic() + 120
    while not ready.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            handle.stop()
            raise RuntimeError(f"prefill worker did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    handle.address = ready.read_text().strip()
    return handle


@pytest.fixture(scope="session")
def shared_worker(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerHandle]:
    handle = start_worker(model_dir, tmp_path_factory.mktemp("worker"))
    yield handle
    handle.stop()


@pytest.fixture
def mitm(shared_worker: WorkerHandle) -> Iterator[Mitm]:
    m = Mitm(shared_worker.address)
    yield m
    m.close()
