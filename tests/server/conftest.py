"""A real `kvfence serve` app on 127.0.0.1 (its HTTP server in a thread) with keys for three organizations.

Running the server in-process keeps the engine reachable, so tests can check the KV pool itself
(pages back to baseline, freed pages zeroed) besides what the HTTP API says.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvfence.scope import CacheScope, TenantIdentity, compute_scope_key
from kvfence.server.app import create_app
from kvfence.server.auth.keys import KeyRing, add_key
from kvfence.server.config import ServerConfig
from tests.http_server.harness import running_server
from tests.netutil import free_port

SECRET = bytes.fromhex("5e" * 32)
MAX_MODEL_LEN = 1024

# name -> (organization, workspace, limits)
TENANTS: dict[str, tuple[str, str, dict[str, int]]] = {
    "alice": ("acme", "research", {}),
    "alice2": ("acme", "sales", {}),
    "limited": ("acme", "research", {"max_concurrent_requests": 1, "max_prompt_tokens": 64}),
    "bob": ("globex", "default", {}),
    "carol": ("initech", "default", {}),
}


@dataclass
class RunningServer:
    base_url: str
    app: Any
    keys: dict[str, str] = field(default_factory=dict)
    cache_scope: CacheScope = CacheScope.ORG

    @property
    def engine(self) -> Any:
        """The LLMEngine (only touch it while no request is in flight)."""
        return self.app.state.serving.engine.engine

    def stats(self) -> Any:
        return self.app.state.serving.engine.stats()

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}"}

    def scope_key(self, who: str, cache_salt: str | None = None) -> bytes:
        org, ws, _ = TENANTS[who]
        return compute_scope_key(TenantIdentity(org, ws, who), self.cache_scope, SECRET, cache_salt=cache_salt)

    def wait_idle(self, timeout: float = 20.0) -> Any:
        """Wait until no request is in flight and the engine has published fresh stats."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            engine = self.app.state.serving.engine
            stats = engine.stats()
            if engine.num_pending == 0 and stats.num_running == 0 and stats.num_waiting == 0:
                time.sleep(0.05)  # let the engine thread process the last abort and refresh stats
                stats = engine.stats()
                if stats.num_running == 0 and stats.num_waiting == 0:
                    return stats
            time.sleep(0.02)
        raise TimeoutError("the server did not become idle")


STEP_DELAY_S = 0.01


def slow_down_steps(server: RunningServer, monkeypatch: pytest.MonkeyPatch, delay_s: float = STEP_DELAY_S) -> None:
    """Make every engine step take at least ``delay_s``, so that a long answer cannot finish
    before the client hangs up (on a busy 2-core machine the tiny model can outrun the reader)."""
    engine = server.engine
    step = engine.step

    def slowed() -> Any:
        time.sleep(delay_s)
        return step()

    monkeypatch.setattr(engine, "step", slowed)


def engine_factory(**overrides: Any) -> Callable[[], Any]:
    def build() -> Any:
        from kvfence.engine.config import EngineConfig
        from kvfence.engine.core.llm_engine import LLMEngine

        options: dict[str, Any] = {"max_model_len": MAX_MODEL_LEN, "kv_cache_tokens": 16384, "device": "cpu",
                                   "seed": 0}
        options.update(overrides)
        return LLMEngine(EngineConfig(**options))

    return build


@contextlib.contextmanager
def serve(
    tmp_path: Path,
    *,
    factory: Callable[[], Any] | None = None,
    cache_scope: CacheScope = CacheScope.ORG,
    max_queue_len: int = 256,
    wait_ready: bool = True,
) -> Iterator[RunningServer]:
    keys_path = tmp_path / "keys.toml"
    keys = {}
    for name, (org, ws, limits) in TENANTS.items():
        keys[name] = add_key(keys_path, organization=org, workspace=ws, name=name, **limits)
    port = free_port()
    config = ServerConfig(port=port, keys_path=keys_path, cache_scope=cache_scope, max_queue_len=max_queue_len)
    app = create_app(config, factory or engine_factory(), secret=SECRET, keyring=KeyRing(keys_path))
    with running_server(app, graceful_timeout_s=2) as srv:  # kvfence serve's own HTTP server
        base = f"http://127.0.0.1:{srv.port}"
        running = RunningServer(base, app, keys, cache_scope)
        deadline = time.monotonic() + 120
        while True:
            try:
                status = httpx.get(base + "/health", timeout=2).status_code
                if status == 200 or (status == 503 and not wait_ready):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.1)
        yield running


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server for the whole session: org-scoped cache, three organizations."""
    with serve(tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.fixture(scope="package")
def disagg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``kvfence serve --disagg`` on the built-in model with one prefill worker: its base URL.

    Shared by every module of this package (its tests only send requests, none changes the server):
    a worker process and a server cost seconds to start, and they stop when the package's tests end."""
    from kvfence.engine.runner.default_model import ensure_default_model
    from tests.disagg.conftest import start_worker
    from tests.disagg.helpers import serve_disaggregated

    model_dir = ensure_default_model(tmp_path_factory.mktemp("home") / "builtin")
    worker = start_worker(model_dir, tmp_path_factory.mktemp("worker"))
    try:
        with serve_disaggregated(model_dir, worker.address, start_timeout_s=120,
                                 kv_cache_tokens=1024, max_model_len=512) as (base, _):
            yield base
    finally:
        worker.stop()
