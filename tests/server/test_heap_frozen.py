"""Once `kvfence serve` has loaded its model, the start-up heap is frozen (out of the cyclic
collector's reach), so a full collection while serving does not scan the model and the engine."""

from __future__ import annotations

import gc
from pathlib import Path

from tests.server.conftest import serve


def test_the_loaded_engine_is_out_of_the_collectors_reach(tmp_path: Path) -> None:
    gc.unfreeze()  # whatever an earlier test froze
    try:
        with serve(tmp_path) as running:
            engine = running.engine
            tracked = {id(o) for o in gc.get_objects()}  # frozen objects are not listed
            assert gc.get_freeze_count() > 0
            assert id(engine) not in tracked
            assert id(engine.runner.model) not in tracked
    finally:
        gc.unfreeze()  # the rest of the test session's objects back under the collector (hypothesis checks referrers)
