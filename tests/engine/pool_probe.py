"""A probe on a model runner's forward pass: does any released page still hold bytes when it starts (I2)?"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvfence.engine.core.scheduler import Scheduler
from kvfence.engine.kv.block_manager import BlockManager, PageState
from kvfence.engine.runner.model_runner import ModelRunner

POISON = 3.0


class PoolProbe:
    """Wraps ``runner.model.forward``: at the start of every forward pass, records the free pages that
    are not zero. A loop that let a forward run over unscrubbed released pages shows up in ``stale``."""

    def __init__(self, runner: ModelRunner, block_manager: BlockManager, free_pages: Callable[[], list[int]]) -> None:
        self.runner, self.block_manager, self.free_pages = runner, block_manager, free_pages
        self.forwards = 0
        self.stale: list[list[int]] = []
        self.checked: set[int] = set()  # every page found free at the start of a forward pass
        model = runner.model
        forward = model.forward

        def checked_forward(*args: Any, **kwargs: Any) -> Any:
            self.forwards += 1
            free = self.free_pages()
            self.checked.update(free)
            dirty = [p for p in free if not runner.pages_are_zero([p])]
            if dirty:
                self.stale.append(dirty)
            return forward(*args, **kwargs)

        model.forward = checked_forward  # type: ignore[method-assign]

    def strand(self, scheduler: Scheduler, request_id: str) -> list[int]:
        """Release a running request as a loop that forgot I2 would: through the scheduler alone, with
        no scrub called; then poison its released pages, so stale bytes cannot pass for zeros."""
        seq = scheduler.get(request_id)
        assert seq is not None and seq.block_table, f"{request_id} holds no pages"
        owned = [p for p in seq.block_table if self.block_manager.page_info(p).state is PageState.OWNED]
        assert owned, [self.block_manager.page_info(p) for p in seq.block_table]
        assert scheduler.abort(request_id) is seq
        assert all(self.block_manager.page_info(p).state is PageState.FREE for p in owned)
        self.runner.kv_pool[:, :, owned] = POISON
        return owned
