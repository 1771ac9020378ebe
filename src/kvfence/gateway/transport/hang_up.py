"""Noticing that the client hung up, from the moment its request body is in to the end of the answer.

Once the body is read, the only ASGI message left to receive is ``http.disconnect``. One small task
per request waits for it and cancels the request's task, wherever it is waiting: for the upstream's
first byte (``FastUpstream.post`` then closes the upstream connection, which is how the backend
learns the request was abandoned), for a whole answer, or in the middle of a stream. The request
path turns that cancellation into a quiet end: limits released, upstream closed, one audit row
(status 499, outcome ``client_gone``).

Stopping the watch does not cancel its task: once the answer is complete the server answers the
pending ``receive`` with ``http.disconnect`` (ASGI requires it) and the task ends on its own. A
cancelled task keeps its ``CancelledError``, whose traceback holds the task's frames and through
them the task: a reference cycle per request that only the cyclic collector frees, and those
collections were pauses every stream in flight waited through (docs/benchmarks.md, gateway).

The lean server (``kvfence.http.cycle.RequestCycle.on_disconnect``) reports the hang-up by callback from its
connection's ``connection_lost``: no task per request there.
"""

from __future__ import annotations

import asyncio

from starlette.types import Receive

__all__ = ["CLIENT_GONE_STATUS", "HangUpWatch"]

CLIENT_GONE_STATUS = 499  # as nginx logs it: the client closed the connection before the answer ended


class HangUpWatch:
    """Cancels the task that created it when the client disconnects (until :meth:`stop`)."""

    def __init__(self, receive: Receive) -> None:
        self.client_gone = False
        self._receive = receive
        self._task = asyncio.current_task()
        self._stopped = False
        self._absorbed = False
        # A server that reports the hang-up by callback (the lean server's RequestCycle) spares the task.
        owner = getattr(receive, "__self__", None)
        on_disconnect = getattr(owner, "on_disconnect", None)
        if callable(on_disconnect):
            on_disconnect(self._disconnected)
            self._watcher: asyncio.Task[None] | None = None
        else:
            self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self._disconnected()

    def _disconnected(self) -> None:
        if not self._stopped and self._task is not None:
            self.client_gone = True
            self._task.cancel()

    def stop(self) -> None:
        """The answer is complete (or the request ended otherwise): a disconnect no longer matters.

        The task ends when the server reports the end of the exchange (see the module docstring).
        The request's task is let go: the watch must not keep it (and its frames) alive."""
        self._stopped = True
        if not self.client_gone:
            self._task = None

    def absorb(self) -> bool:
        """Called on ``CancelledError``: True (and the cancellation undone) if it was the hang-up."""
        if not self.client_gone or self._task is None:
            return False
        if not self._absorbed:
            self._absorbed = True
            self._task.uncancel()
        return True
