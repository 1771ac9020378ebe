"""Fixtures of the attack suite: the built-in model, engines with a watched KV pool, test servers.

The oracle most attacks here share is :class:`FreshPageWatch`: it wraps the model runner's forward
pass and checks, before every batch runs, that each page a request is about to write for the first
time is all zero (I2). It fails the test at the first stale byte, whatever path (abort,
preemption, failure, handoff) put the page there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvfence.engine.core.scheduler import ScheduledSeq
from kvfence.engine.kv.block_manager import PageState
from kvfence.engine.runner.default_model import ensure_default_model


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_default_model(tmp_path_factory.mktemp("security-home") / "builtin")


class FreshPageWatch:
    """Checks I2 at every forward pass of ``engine`` (an LLMEngine, or anything with runner+ledger).

    A page at block-table index ``i`` of a request computing positions ``start..`` holds none of
    its own KV yet when ``i * page_size >= start``; unless it is a same-scope prefix page, it must
    be all zero at that moment, or the request would sit on another request's bytes. The check runs
    when the model's forward pass starts (inside ``runner.execute``, after the runner's own scrub).
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.runner = engine.runner
        self.block_manager = engine.block_manager
        self.checked_pages = 0
        self.stale: list[tuple[str, int]] = []
        self._items: list[ScheduledSeq] = []
        self._execute: Callable[..., Any] = self.runner.execute
        self.runner.execute = self._batch
        model = self.runner.model
        self._forward: Callable[..., Any] = model.forward
        model.forward = self._watched

    def _batch(self, items: list[ScheduledSeq], *args: Any, **kwargs: Any) -> Any:
        self._items = items
        try:
            return self._execute(items, *args, **kwargs)
        finally:
            self._items = []

    def _watched(self, *args: Any, **kwargs: Any) -> Any:
        ps = self.block_manager.page_size
        for it in self._items:
            first_unwritten = -(-it.start // ps)
            for page_id in it.seq.block_table[first_unwritten:]:
                if self.block_manager.page_info(page_id).state is PageState.CACHED:
                    continue  # a same-scope prefix page (I1 checks those)
                self.checked_pages += 1
                if not self.runner.pages_are_zero([page_id]):
                    self.stale.append((it.seq.request_id, page_id))
        return self._forward(*args, **kwargs)

    def assert_clean(self) -> None:
        assert self.checked_pages > 0, "the watch saw no fresh page: the attack did not run"
        assert self.stale == [], f"requests were given pages holding stale KV (I2): {self.stale}"
