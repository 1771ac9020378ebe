"""Over-length and malformed requests in every shape (I3): a 400 before the engine sees anything.

The engine's ``add_request`` is watched: a request the server rejects must never reach it, so no
page is ever allocated for it. The server runs with max_model_len 1024 and a 16384-token pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.conftest import MAX_MODEL_LEN, RunningServer, serve

VOCAB = 262  # the built-in model


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, list[int]]]:
    with serve(tmp_path_factory.mktemp("admission")) as server:
        engine = server.engine
        real = engine.add_request
        admitted: list[int] = []  # prompt lengths the engine was given

        def add_request(request_id: str, prompt: list[int], *args: Any) -> None:
            admitted.append(len(prompt))
            real(request_id, prompt, *args)

        engine.add_request = add_request
        yield server, admitted


def _post(server: RunningServer, body: dict[str, Any], path: str = "/v1/completions") -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, headers=server.headers("bob"), timeout=60)


@pytest.mark.parametrize("prompt", [
    [-1], [VOCAB], [2**70], [True], [1.5], [[1, 2], [VOCAB + 5]], [[1], [-3]], [], [[]], ["a", 3],
])
def test_bad_token_ids_are_rejected_before_the_engine(watched: tuple[RunningServer, list[int]], prompt: Any) -> None:
    server, admitted = watched
    before = len(admitted)
    r = _post(server, {"prompt": prompt, "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert len(admitted) == before


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_plus_max_tokens_is_checked_exactly(watched: tuple[RunningServer, list[int]], stream: bool) -> None:
    server, admitted = watched
    prompt = [7 + i % 200 for i in range(1000)]
    fits = _post(server, {"prompt": prompt, "max_tokens": MAX_MODEL_LEN - 1000, "stream": stream, "ignore_eos": True})
    assert fits.status_code == 200
    before = len(admitted)
    over = _post(server, {"prompt": prompt, "max_tokens": MAX_MODEL_LEN - 999, "stream": stream})
    assert over.status_code == 400  # a plain 400, not a 200 stream that fails later
    assert over.json()["error"]["code"] == "context_length_exceeded"
    assert len(admitted) == before
    server.wait_idle()
    assert server.engine.block_manager.num_used_pages == 0


@pytest.mark.parametrize("fields", [{"n": 20}, {"best_of": 20}, {"n": 4, "best_of": 20}])
def test_choices_that_multiply_past_the_pool_are_rejected(watched: tuple[RunningServer, list[int]],
                                                          fields: dict[str, int]) -> None:
    """Each choice fits the context, all of them together do not fit the pool: nothing runs."""
    server, admitted = watched
    before = len(admitted)
    r = _post(server, {"prompt": [9] * 100, "max_tokens": 900, **fields})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert len(admitted) == before


def test_chat_over_length_in_the_messages(watched: tuple[RunningServer, list[int]]) -> None:
    server, admitted = watched
    before = len(admitted)
    r = _post(server, {"messages": [{"role": "user", "content": "x" * 2000}]}, "/v1/chat/completions")
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert len(admitted) == before


def test_the_server_refuses_to_start_when_the_pool_is_smaller_than_the_context(tmp_path: Path) -> None:
    """I3 at start-up: max_model_len beyond the pool is a start-up error; ``auto`` lowers it to fit."""
    from kvfence.engine.config import EngineConfig
    from kvfence.engine.core.llm_engine import LLMEngine
    from kvfence.errors import CapacityError

    with pytest.raises(CapacityError):
        LLMEngine(EngineConfig(max_model_len=2048, kv_cache_tokens=1024, device="cpu"))
    engine = LLMEngine(EngineConfig(max_model_len="auto", kv_cache_tokens=1024, device="cpu"))
    assert engine.capacity.max_model_len <= engine.capacity.pool_tokens
