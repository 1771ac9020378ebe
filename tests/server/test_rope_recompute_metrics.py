"""``/metrics`` counts the sequences recomputed when Phi-3's LongRoPE switches factors.

A sequence that grows past ``original_max_position_embeddings`` while it generates is released and
recomputed with the long factors (see ``tests/engine/test_phi3_longrope_crossing.py``); an operator
sees how often in ``kvfence_rope_recomputes_total``, next to the preemptions.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.engine.test_phi3_longrope_crossing import ORIGINAL, build_crossing_model
from tests.server.conftest import RunningServer, engine_factory, serve


@pytest.fixture(scope="module")
def phi3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    model_dir = build_crossing_model(tmp_path_factory.mktemp("phi3") / "model", "full")
    factory = engine_factory(model=str(model_dir), max_model_len=128, kv_cache_tokens=1024, page_size=8)
    with serve(tmp_path_factory.mktemp("phi3-server"), factory=factory) as running:
        yield running


def _recomputes(server: RunningServer) -> float:
    metrics = httpx.get(server.base_url + "/metrics", timeout=10).text
    lines = [line for line in metrics.splitlines() if line.startswith("kvfence_rope_recomputes_total ")]
    assert len(lines) == 1, metrics
    return float(lines[0].split()[1])


def _complete(server: RunningServer, prompt_tokens: int, max_tokens: int) -> None:
    body = {"prompt": [5 + i % 200 for i in range(prompt_tokens)], "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    r = httpx.post(server.base_url + "/v1/completions", json=body, headers=server.headers("alice"), timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == max_tokens


def test_a_sequence_crossing_the_original_length_counts_one_recompute(phi3: RunningServer) -> None:
    assert _recomputes(phi3) == 0
    _complete(phi3, 4, 8)  # stays below the switch
    assert _recomputes(phi3) == 0
    _complete(phi3, ORIGINAL - 7, 16)  # crosses it while generating
    assert _recomputes(phi3) == 1
    _complete(phi3, ORIGINAL + 8, 4)  # past it from the start: long factors from the first token, no recompute
    assert _recomputes(phi3) == 1
