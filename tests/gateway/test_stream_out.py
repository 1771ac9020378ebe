"""The send pump: ASGI ``send`` driven from read callbacks, with a server that sometimes holds a send
back (backpressure), as uvicorn does when the client's socket is full."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from kvfence.gateway.transport.stream_out import SendPump


class FakeUpstream:
    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False


class FakeServer:
    """Records messages; while ``gate`` is set, each send waits for it (a full socket buffer)."""

    def __init__(self) -> None:
        self.messages: list[tuple[bytes, bool]] = []
        self.gate: asyncio.Future[None] | None = None

    async def send(self, message: dict[str, Any]) -> None:
        if self.gate is not None:
            await self.gate
        self.messages.append((message["body"], message["more_body"]))


def test_pieces_go_out_synchronously_and_the_last_one_ends_the_answer() -> None:
    async def run() -> None:
        server, upstream, stopped = FakeServer(), FakeUpstream(), []
        pump = SendPump(server.send, upstream, lambda: stopped.append(True))  # type: ignore[arg-type]
        pump.body(b"a")
        pump.body(b"b")
        assert server.messages == [(b"a", True), (b"b", True)]  # no await in between: sent in the callback
        pump.end(None, b"c")
        assert server.messages[-1] == (b"c", False) and pump.sent_last and stopped == [True]
        assert await pump.done is None
        assert upstream.pauses == 0

    asyncio.run(run())


def test_a_held_send_pauses_the_upstream_and_what_came_meanwhile_goes_out_in_one_piece() -> None:
    async def run() -> None:
        server, upstream = FakeServer(), FakeUpstream()
        pump = SendPump(server.send, upstream, lambda: None)  # type: ignore[arg-type]
        server.gate = asyncio.get_running_loop().create_future()
        pump.body(b"1")
        assert upstream.paused and server.messages == []
        pump.body(b"2")  # the same read brought more
        pump.body(b"3")
        pump.end(None, b"4")
        gate, server.gate = server.gate, None
        gate.set_result(None)
        assert await pump.done is None
        assert server.messages == [(b"1", True), (b"234", True)]
        assert not pump.sent_last  # the stream's task sends the last message itself

    asyncio.run(run())


def test_upstream_error_after_a_tail() -> None:
    async def run() -> None:
        server, upstream = FakeServer(), FakeUpstream()
        pump = SendPump(server.send, upstream, lambda: None)  # type: ignore[arg-type]
        error = httpx.RemoteProtocolError("gone")
        pump.end(error, b"partial")
        assert await pump.done is error
        assert server.messages == [(b"partial", True)] and not pump.sent_last

    asyncio.run(run())


def test_a_send_that_raises_ends_the_pump_with_it() -> None:
    async def run() -> None:
        async def broken(message: dict[str, Any]) -> None:
            raise RuntimeError("server refused")

        pump = SendPump(broken, FakeUpstream(), lambda: None)  # type: ignore[arg-type]
        pump.body(b"x")
        outcome = await pump.done
        assert isinstance(outcome, RuntimeError)
        pump.body(b"y")  # ignored: nothing more can be sent
        pump.close()

    asyncio.run(run())


def test_close_abandons_a_held_send() -> None:
    async def run() -> None:
        server, upstream = FakeServer(), FakeUpstream()
        pump = SendPump(server.send, upstream, lambda: None)  # type: ignore[arg-type]
        server.gate = asyncio.get_running_loop().create_future()
        pump.body(b"1")
        pump.close()
        server.gate.set_result(None)
        await asyncio.sleep(0)
        assert server.messages == [] and not pump.done.done()

    asyncio.run(run())
