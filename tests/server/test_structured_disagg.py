"""Structured outputs on a disaggregated server are a clear 400, never an unconstrained answer.

The first token is sampled on the prefill worker, which cannot run a request's grammar, so the
engine refuses the request before anything is allocated; the client must learn why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.engine.default_model import ensure_default_model
from kvfence.server.app import create_app
from kvfence.server.config import ServerConfig
from tests.disagg.conftest import start_worker
from tests.disagg.helpers import make_engine
from tests.netutil import free_port


@pytest.fixture(scope="module")
def disagg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model_dir = ensure_default_model(tmp_path_factory.mktemp("home") / "builtin")
    worker = start_worker(model_dir, tmp_path_factory.mktemp("worker"))
    engines: list[DisaggregatedEngine] = []

    def factory() -> DisaggregatedEngine:
        engines.append(make_engine(model_dir, worker.address, kv_cache_tokens=1024, max_model_len=512))
        return engines[-1]

    port = free_port()
    app = create_app(ServerConfig(port=port), factory, secret=b"s" * 32, keyring=None)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the disaggregated test server did not start")
            time.sleep(0.1)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        for engine in engines:
            engine.close()
        worker.stop()


@pytest.mark.parametrize("extra", [
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
    {"structured_outputs": {"choice": ["a", "b"]}},
])
def test_structured_outputs_are_refused_in_disaggregated_mode(disagg_server: str, extra: dict[str, object],
                                                               tmp_path: Path) -> None:
    r = httpx.post(disagg_server + "/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "structured outputs" in error["message"] and "disaggregated" in error["message"]
    assert error["param"] == next(iter(extra))  # the client's field, not the engine's
    plain = httpx.post(disagg_server + "/v1/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert plain.status_code == 200, plain.text
