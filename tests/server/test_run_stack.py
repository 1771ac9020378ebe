"""`make run`'s script (scripts/run-stack.sh) as a newcomer meets it: a port already taken."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("taken", ["server", "gateway"])
def test_a_port_in_use_stops_make_run_at_once_with_a_clear_message(taken: str) -> None:
    with socket.socket() as held, socket.socket() as free:
        held.bind(("127.0.0.1", 0))
        held.listen()
        free.bind(("127.0.0.1", 0))  # only to pick a port nobody holds; closed before the script runs
        held_port, free_port = held.getsockname()[1], free.getsockname()[1]
        free.close()
        ports = (held_port, free_port) if taken == "server" else (free_port, held_port)
        env = {**os.environ, "PY": sys.executable, "KVFENCE": str(BIN / "kvfence")}
        proc = subprocess.run(["bash", "scripts/run-stack.sh", "127.0.0.1", str(ports[0]), str(ports[1])], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"127.0.0.1:{held_port} is already in use" in proc.stderr
    assert "Traceback" not in proc.stderr and "waiting for" not in proc.stderr
