"""Real processes on loopback for the gateway's end-to-end tests: fake backends and the gateway."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.netutil import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
KVFENCE = str(Path(sys.executable).parent / "kvfence")
# This checkout's code first: in a git worktree the installed package may be another checkout's.
CHILD_PYTHONPATH = os.pathsep.join([str(REPO / "src"), str(REPO)])


class Process:
    def __init__(self, argv: list[str], port: int, env: dict[str, str] | None = None,
                 log_path: Path | None = None) -> None:
        self.port = port
        self.log_path = log_path
        if log_path is not None:
            with open(log_path, "wb") as out:  # the child keeps its own copy of the descriptor
                self.proc = subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, **(env or {})},
                                             stdout=out, stderr=out)
        else:
            self.proc = subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, **(env or {})},
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self._wait(port, timeout=60)
        except TimeoutError:
            self.stop()
            log = log_path.read_text() if log_path else ""
            raise RuntimeError(f"{argv} did not start:\n{log}") from None

    def _wait(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TimeoutError("process exited")
            try:
                wait_for_port(port, timeout=0.5)
                return
            except TimeoutError:
                continue
        raise TimeoutError(f"nothing listened on port {port}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FakeBackend(Process):
    """A recording OpenAI-compatible test backend (tests/gateway/fake_backend.py)."""

    def __init__(self, name: str, *extra: str) -> None:
        port = free_port()
        super().__init__([sys.executable, "-m", "tests.gateway.fake_backend", "--port", str(port),
                          "--name", name, *extra], port)
        self.name = name
        self.url = f"http://127.0.0.1:{port}/v1"
        self.root = f"http://127.0.0.1:{port}"

    def received(self) -> list[dict[str, Any]]:
        return list(httpx.get(self.root + "/_received").json())

    def clear(self) -> None:
        httpx.delete(self.root + "/_received")

    def control(self, **settings: Any) -> None:
        httpx.post(self.root + "/_control", json=settings)


class KvfenceServe(Process):
    """`kvfence serve --no-auth` on the built-in model, returned once its model answers /health."""

    def __init__(self, tmp: Path, *extra: str, kv_cache_tokens: int = 1024) -> None:
        port = free_port()
        super().__init__([KVFENCE, "serve", "--no-auth", "--port", str(port), "--kv-cache-tokens",
                          str(kv_cache_tokens), "--max-model-len", "auto", "--log-level", "warning", *extra],
                         port, log_path=tmp / "serve.log")
        for _ in range(600):  # the port opens before the model is loaded
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail("kvfence serve did not become ready:\n" + (tmp / "serve.log").read_text())


class Gateway(Process):
    def __init__(self, policy: dict[str, Any], tmp: Path, env: dict[str, str] | None = None,
                 extra: list[str] | None = None) -> None:
        port = free_port()
        self.config = tmp / "gateway.yaml"
        self.config.write_text(yaml.safe_dump(policy, sort_keys=False))
        super().__init__([KVFENCE, "gateway", "--config", str(self.config), "--port", str(port),
                          "--log-level", "info", *(extra or [])],
                         port, env=env, log_path=tmp / "gateway.log")
        self.url = f"http://127.0.0.1:{port}/v1"
        self.root = f"http://127.0.0.1:{port}"


# The metrics key of tests that read per-tenant series (without gateway.metrics_key_file, /metrics sums
# tenants away): with_metrics_key() puts it in a policy, metrics_text() reads /metrics with it.
METRICS_KEY = "tests-gateway-metrics-key-0123456789"


def with_metrics_key(policy: dict[str, Any], tmp: Path) -> dict[str, Any]:
    (tmp / "metrics.key").write_text(METRICS_KEY + "\n")
    policy.setdefault("gateway", {})["metrics_key_file"] = str(tmp / "metrics.key")
    return policy


def metrics_text(root: str) -> str:
    return httpx.get(root + "/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"}).text


_OPEN_CLIENTS: list[openai.OpenAI] = []


def openai_client(base_url: str, api_key: str, **kw: Any) -> openai.OpenAI:
    """An ``openai`` client closed when the test module ends. One dropped unclosed keeps its pooled
    keep-alive socket open until the garbage collector finds it: a ResourceWarning that ``-W error``
    turns into a failed run (seen with the lean server, which keeps idle connections open longer)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, **kw)
    _OPEN_CLIENTS.append(client)
    return client


@pytest.fixture(scope="module", autouse=True)
def _close_openai_clients() -> Iterator[None]:
    yield
    while _OPEN_CLIENTS:
        _OPEN_CLIENTS.pop().close()


@pytest.fixture(scope="session")
def backend_a() -> Iterator[FakeBackend]:
    # Advertises 4096 tokens of context but its KV cache holds 64 x 16 = 1024 (the incident's shape).
    backend = FakeBackend("shared-a", "--max-model-len", "4096", "--vllm-blocks", "64", "--block-size", "16")
    yield backend
    backend.stop()


@pytest.fixture(scope="session")
def backend_b() -> Iterator[FakeBackend]:
    backend = FakeBackend("dedicated-b", "--max-model-len", "8192")
    yield backend
    backend.stop()
