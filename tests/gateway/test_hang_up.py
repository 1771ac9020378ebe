"""HangUpWatch: a hang-up cancels the request's task; a stopped watch ends quietly, leaving no cycle."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from kvfence.gateway.transport.hang_up import HangUpWatch


class Exchange:
    """An ASGI ``receive`` whose body is already read: its next message is the disconnect, sent when
    the client hangs up or (as the ASGI spec says servers do) once the answer is complete."""

    def __init__(self) -> None:
        self._over = asyncio.Event()

    def end(self) -> None:
        self._over.set()

    async def receive(self) -> dict[str, Any]:
        await self._over.wait()
        return {"type": "http.disconnect"}


def test_a_hang_up_cancels_the_request_and_is_absorbed() -> None:
    async def main() -> None:
        exchange = Exchange()

        async def request() -> str:
            watch = HangUpWatch(exchange.receive)
            try:
                await asyncio.sleep(10)  # waiting on the upstream
            except asyncio.CancelledError:
                assert watch.absorb() and watch.client_gone
                return "client gone"
            return "answered"

        task = asyncio.create_task(request())
        await asyncio.sleep(0)
        exchange.end()
        assert await asyncio.wait_for(task, 2) == "client gone"
        assert not task.cancelled()

    asyncio.run(main())


def test_a_stopped_watch_ends_with_the_exchange_without_cancelling_anything() -> None:
    async def main() -> None:
        exchange = Exchange()
        watch: HangUpWatch | None = None

        async def request() -> None:
            nonlocal watch
            watch = HangUpWatch(exchange.receive)
            await asyncio.sleep(0)
            watch.stop()  # the answer is complete
            exchange.end()  # ... so the server reports the end of the exchange
            await asyncio.sleep(0.01)

        await asyncio.wait_for(asyncio.create_task(request()), 2)
        assert watch is not None and not watch.client_gone
        watcher = watch._watcher
        await asyncio.wait_for(watcher, 2)
        assert watcher.done() and not watcher.cancelled()

    asyncio.run(main())


def test_a_stopped_watch_leaves_no_reference_cycle() -> None:
    """A cancelled watcher task kept a CancelledError whose traceback led back to the task: garbage
    that only the cyclic collector frees, with a pause per collection under load."""

    async def one_request() -> None:
        exchange = Exchange()

        async def request() -> None:
            watch = HangUpWatch(exchange.receive)
            await asyncio.sleep(0)
            watch.stop()
            exchange.end()

        await asyncio.create_task(request())
        for _ in range(3):
            await asyncio.sleep(0)  # let the watcher see the disconnect and end

    async def main() -> int:
        await one_request()  # warm up: first-use caches of asyncio
        gc.collect()
        gc.disable()
        try:
            for _ in range(20):
                await one_request()
            return gc.collect()
        finally:
            gc.enable()

    assert asyncio.run(main()) == 0
