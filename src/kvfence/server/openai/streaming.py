"""Watching for client disconnects, so an abandoned request is aborted and its pages released.

Both helpers listen on the ASGI ``receive`` channel for ``http.disconnect`` while the work runs,
and cancel the work when it arrives. The caller's ``on_close`` then aborts the request, which
releases its KV pages and puts them on the scrub list (I2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["ClientDisconnected", "EventStreamResponse", "run_until_disconnect"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was complete."""


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def run_until_disconnect(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """Await ``work()``; raise :class:`ClientDisconnected` if the client leaves first.

    The request body must already have been read: what ``receive`` yields next is the disconnect.
    """
    with anyio.CancelScope() as cancel_scope:
        watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, cancel_scope))
        try:
            return await work()
        finally:
            watcher.cancel()
    raise ClientDisconnected()


class EventStreamResponse(Response):
    """A ``text/event-stream`` response that stops as soon as the client disconnects.

    ``on_close`` runs exactly once whether the stream ended, failed or was abandoned.
    """

    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(None, status_code=200, headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        # The length of a stream is not known up front.
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.chunks = chunks
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            with anyio.CancelScope() as cancel_scope:
                watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, cancel_scope))
                try:
                    await send({"type": "http.response.start", "status": self.status_code,
                                "headers": self.raw_headers})
                    async for chunk in self.chunks:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                finally:
                    watcher.cancel()
        except OSError:
            log.debug("client went away during a stream")
        finally:
            self.on_close()
            aclose = getattr(self.chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
