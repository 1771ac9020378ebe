"""A real ``kvfence serve`` process on 127.0.0.1 with keys for two organisations, for the auditor.

The server is started through the command line exactly as a user would (``kvfence serve --keys
FILE --cache-scope SCOPE``), on the built-in random-weight model, so the audit sees nothing but
HTTP. Its keys are created with the server's own key-file interface.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from kvfence.server.auth.keys import add_key
from tests.netutil import free_port

__all__ = ["KvfenceServer", "kvfence_serve"]


@dataclass(frozen=True)
class KvfenceServer:
    url: str
    key_a: str  # acme / research / a
    key_a2: str  # acme / sales / a2: same organisation, other workspace and key
    key_b: str  # globex / default / b: another organisation

    @property
    def key_args(self) -> list[str]:
        return ["--key", self.key_a, "--same-org-key", self.key_a2, "--key-b", self.key_b]


@contextmanager
def kvfence_serve(tmp: Path, *extra_args: str, cache_scope: str = "org", startup_s: float = 180.0
                  ) -> Iterator[KvfenceServer]:
    """Run ``kvfence serve`` until the block ends; output goes to ``tmp/serve.log``."""
    keys = tmp / "keys.toml"
    key_a = add_key(keys, organization="acme", workspace="research", name="a")
    key_a2 = add_key(keys, organization="acme", workspace="sales", name="a2")
    key_b = add_key(keys, organization="globex", workspace="default", name="b")
    port = free_port()
    # One torch thread: on a shared 2-core machine torch's spinning intra-op threads make TTFT 10x
    # noisier (measured: hit/miss medians 55/120 ms with one thread, overlapping 0.1-2 s without).
    env = {**os.environ, "KVFENCE_HOME": str(tmp / "home"), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("KVFENCE_SERVER_SECRET", None)
    log = (tmp / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from kvfence.cli import main; main()", "serve", "--host", "127.0.0.1",
         "--port", str(port), "--keys", str(keys), "--cache-scope", cache_scope,
         "--secret-file", str(tmp / "server-secret"), "--log-level", "warning", *extra_args],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"kvfence serve exited with {proc.returncode}: {(tmp / 'serve.log').read_text()}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("kvfence serve did not become healthy in time")
            time.sleep(0.2)
        yield KvfenceServer(url, key_a, key_a2, key_b)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
