"""The runner's zero-fill (I2): exactly the released pages, in every layer, K and V; nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.runner.scrub import page_runs as _runs


def test_runs_group_consecutive_pages() -> None:
    assert _runs([]) == []
    assert _runs([7]) == [(7, 7)]
    assert _runs([5, 3, 4, 9, 0, 10, 4]) == [(0, 0), (3, 5), (9, 10)]


@pytest.mark.parametrize("pages", [[0], [3, 4, 5], [9, 2, 3, 11, 0], list(range(12))])
def test_scrub_zeroes_exactly_the_given_pages(default_model_dir: Path, pages: list[int]) -> None:
    runner = LLM(model=str(default_model_dir), kv_cache_tokens=12 * 16, max_model_len="auto",
                 page_size=16, device="cpu").engine.runner
    assert runner.num_pages == 12
    runner.kv_pool.fill_(1.0)
    runner.kv_pool[:, :, runner.null_page] = 0
    before = runner.scrubbed_pages
    runner.scrub(pages)
    assert runner.pages_are_zero(pages)
    others = [p for p in range(runner.num_pages) if p not in pages]
    for p in others:  # untouched in every layer, K and V
        assert bool((runner.kv_pool[:, :, p] == 1.0).all()), f"page {p} was not released but changed"
    assert runner.scrubbed_pages - before == len(pages) and runner.scrub_seconds > 0
