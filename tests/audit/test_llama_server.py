"""``kvfence audit`` against a real llama.cpp ``llama-server``, when one is installed.

llama-server shares one prompt cache (its slots) across every API key, so the cache-sharing audit
must find cross-organisation sharing; its context is discovered from ``meta.n_ctx`` / ``/props``.
The test needs a ``llama-server`` binary (``KVFENCE_LLAMA_SERVER`` or on ``PATH``) and a GGUF model
file (``KVFENCE_LLAMA_MODEL``); nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.audit.conftest import AuditRun, check_result
from tests.netutil import free_port

pytestmark = pytest.mark.slow

_BINARY = os.environ.get("KVFENCE_LLAMA_SERVER") or shutil.which("llama-server")
_MODEL = os.environ.get("KVFENCE_LLAMA_MODEL")
_KEYS = ["key-a", "key-a2", "key-b"]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not _BINARY:
        pytest.skip("no llama-server binary: set KVFENCE_LLAMA_SERVER or put llama-server on PATH")
    if not _MODEL or not Path(_MODEL).is_file():
        pytest.skip("no GGUF model for llama-server: set KVFENCE_LLAMA_MODEL to a local .gguf file")
    port = free_port()
    log = (tmp_path_factory.mktemp("llama") / "server.log").open("w")
    proc = subprocess.Popen([_BINARY, "-m", _MODEL, "--host", "127.0.0.1", "--port", str(port), "-c", "2048",
                             "--api-key", ",".join(_KEYS)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("llama-server did not become healthy")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_llama_server_context_is_discovered_and_its_boundary_is_no_finding(run_audit: AuditRun,
                                                                          llama_server: str) -> None:
    result, data = run_audit("admission", llama_server, "--seed", "1")
    admission = check_result(data, "admission")
    assert admission["measurements"]["max_context_source"].startswith(("/v1/models meta.n_ctx", "/props"))
    assert not any("just above context" in e["title"] for e in admission["evidence"])
    assert result.exit_code == 0, result.output


def test_llama_server_shares_its_cache_across_keys(run_audit: AuditRun, llama_server: str) -> None:
    result, data = run_audit("cache-sharing", llama_server, "--seed", "2", "--prompt-tokens", "800",
                             "--time-budget", "1200")
    assert result.exit_code == 1, result.output
    assert check_result(data, "cache-sharing")["measurements"]["levels"]["cross-org"]["shares_cache"]
