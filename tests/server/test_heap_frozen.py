"""Once `kvfence serve` has loaded its model, the start-up heap is frozen (out of the cyclic
collector's reach), so a full collection while serving does not scan the model and the engine; an
app embedded in another program (``freeze_heap`` off, the default) leaves its host's heap alone."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import httpx
import pytest

from kvfence.server.app import create_app
from kvfence.server.config import ServerConfig
from tests.http_server.harness import running_server
from tests.server.conftest import SECRET, engine_factory


@pytest.mark.parametrize("freeze_heap", [True, False])
def test_the_loaded_engine_is_out_of_the_collectors_reach(freeze_heap: bool, tmp_path: Path) -> None:
    gc.unfreeze()  # whatever an earlier test froze
    app = create_app(ServerConfig(port=0), engine_factory(), secret=SECRET, keyring=None, freeze_heap=freeze_heap)
    try:
        with running_server(app, graceful_timeout_s=2) as srv:  # kvfence serve's own HTTP server
            deadline = time.monotonic() + 120
            while httpx.get(f"http://127.0.0.1:{srv.port}/health", timeout=2).status_code != 200:
                assert time.monotonic() < deadline, "the server did not become ready"
                time.sleep(0.1)
            engine = app.state.serving.engine.engine
            tracked = {id(o) for o in gc.get_objects()}  # frozen objects are not listed
            assert (gc.get_freeze_count() > 0) is freeze_heap
            assert (id(engine) not in tracked) is freeze_heap
            assert (id(engine.runner.model) not in tracked) is freeze_heap
    finally:
        gc.unfreeze()  # the rest of the session's objects back under the collector (hypothesis checks referrers)
