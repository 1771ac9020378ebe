"""The gateway's lean HTTP/1.1 upstream client against scripted raw-socket servers on loopback.

Each server answers every request on a connection with the next scripted reply (raw bytes, or a
callable that gets the writer), so framing, keep-alive, early closes and timeouts are exact.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from kvfence.errors import ConfigError
from kvfence.gateway.transport.fast_pool import FastUpstream
from tests.netutil import free_port

Reply = bytes | Callable[[asyncio.StreamWriter], Awaitable[None]]


class ScriptedServer:
    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                reply = self.replies.pop(0)
                if isinstance(reply, bytes):
                    writer.write(reply)
                    await writer.drain()
                else:
                    await reply(writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client hung up, or the test is over
        finally:
            writer.close()


@asynccontextmanager
async def serve(replies: list[Reply]) -> AsyncIterator[tuple[ScriptedServer, str]]:
    script = ScriptedServer(replies)
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield script, f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(h + "\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body


def chunked(*parts: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    for part in parts:
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    return out + b"0\r\n\r\n"


async def read_all(response: object) -> bytes:
    return b"".join([chunk async for chunk in response.aiter_raw()])  # type: ignore[attr-defined]


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_request_bytes_and_keep_alive_reuse() -> None:
    async def main() -> None:
        async with serve([ok(b'{"a":1}', "content-type: application/json"), chunked(b"data: 1\n\n", b"data: 2\n\n")]) as (
                script, url):
            client = FastUpstream(url)
            first = await client.post("/chat/completions", b'{"x":1}', {"content-type": "application/json",
                                                                      "x-request-id": "r1"})
            assert first.status_code == 200 and first.headers["content-type"] == "application/json"
            assert await first.aread() == b'{"a":1}'
            second = await client.post("/completions", b"{}", {"accept": "text/event-stream"})
            assert await read_all(second) == b"data: 1\n\ndata: 2\n\n"
            await second.aclose()
            assert script.connections == 1 and client.num_connections == 1  # one kept-alive connection
            head = script.requests[0].decode()
            assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
            assert f"host: {url.split('/')[2]}\r\n" in head and "content-length: 7\r\n" in head
            assert "x-request-id: r1\r\n" in head and head.endswith('\r\n\r\n{"x":1}')
            assert script.requests[1].decode().startswith("POST /v1/completions HTTP/1.1\r\n")
            await client.aclose()

    run(main())


def test_body_until_close_and_connection_close_are_not_reused() -> None:
    async def main() -> None:
        async def until_close(writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it")
            await writer.drain()
            writer.close()

        async with serve([until_close, ok(b"x", "connection: close"), ok(b"y")]) as (script, url):
            client = FastUpstream(url)
            assert await (await client.post("/a", b"", {})).aread() == b"all of it"
            assert await (await client.post("/a", b"", {})).aread() == b"x"
            assert await (await client.post("/a", b"", {})).aread() == b"y"
            assert script.connections == 3
            await client.aclose()

    run(main())


def test_server_dropping_mid_body_is_a_protocol_error() -> None:
    async def main() -> None:
        async def broken(writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await writer.drain()
            writer.close()

        async def silent(writer: asyncio.StreamWriter) -> None:
            writer.close()

        async with serve([broken, silent, b"NOT HTTP AT ALL\r\n\r\n"]) as (_, url):
            client = FastUpstream(url)
            response = await client.post("/a", b"", {})
            with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
                await read_all(response)
            with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
                await client.post("/a", b"", {})
            with pytest.raises(httpx.RemoteProtocolError, match="malformed"):
                await client.post("/a", b"", {})
            await asyncio.sleep(0.05)  # the closes have reached the pool
            assert client.num_connections == 0
            await client.aclose()

    run(main())


def test_connect_error_read_timeout_and_pool_timeout() -> None:
    async def main() -> None:
        with pytest.raises(httpx.ConnectError):
            await FastUpstream(f"http://127.0.0.1:{free_port()}/v1", connect_timeout_s=2).post("/a", b"", {})

        async def stall(writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(1.5)

        async def slow_body(writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            await writer.drain()
            await asyncio.sleep(1.5)

        async with serve([stall, slow_body, stall]) as (_, url):
            client = FastUpstream(url, read_timeout_s=0.2, max_connections=1, pool_timeout_s=0.2)
            with pytest.raises(httpx.ReadTimeout):
                await client.post("/a", b"", {})
            response = await client.post("/a", b"", {})
            with pytest.raises(httpx.ReadTimeout):
                await read_all(response)
            await client.aclose()
            one = FastUpstream(url, read_timeout_s=1.0, max_connections=1, pool_timeout_s=0.1)
            held = asyncio.ensure_future(one.post("/a", b"", {}))  # takes the only connection
            await asyncio.sleep(0.05)
            with pytest.raises(httpx.PoolTimeout):
                await one.post("/a", b"", {})
            with pytest.raises(httpx.ReadTimeout):
                await held
            await one.aclose()

    run(main())


def test_waiting_for_a_connection_gets_the_released_one() -> None:
    async def main() -> None:
        async with serve([ok(b"one"), ok(b"two")]) as (script, url):
            client = FastUpstream(url, max_connections=1, pool_timeout_s=5)
            first = await client.post("/a", b"", {})
            second = asyncio.ensure_future(client.post("/a", b"", {}))
            await asyncio.sleep(0.05)
            assert not second.done()
            assert await first.aread() == b"one"
            assert await (await second).aread() == b"two"
            assert script.connections == 1
            await client.aclose()

    run(main())


def test_closing_an_unfinished_answer_closes_its_connection() -> None:
    async def main() -> None:
        async def endless(writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for _ in range(100):
                writer.write(b"3\r\nabc\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)

        async with serve([endless, ok(b"fresh")]) as (script, url):
            client = FastUpstream(url)
            response = await client.post("/a", b"", {})
            assert (await response.aiter_raw().__anext__()).startswith(b"abc")
            await response.aclose()
            assert await (await client.post("/a", b"", {})).aread() == b"fresh"
            assert script.connections == 2
            await client.aclose()

    run(main())


def test_gzip_is_decoded_by_aread_and_bad_headers_are_refused() -> None:
    async def main() -> None:
        packed = gzip.compress(b'{"ok":true}')
        async with serve([ok(packed, "content-encoding: gzip")]) as (_, url):
            client = FastUpstream(url)
            assert await (await client.post("/a", b"", {})).aread() == b'{"ok":true}'
            with pytest.raises(httpx.LocalProtocolError):
                await client.post("/a", b"", {"x-evil": "a\r\nhost: elsewhere"})
            await client.aclose()
        with pytest.raises(ValueError, match="plain http"):
            FastUpstream("https://example.com/v1")

    run(main())


def test_interim_1xx_answer_is_skipped() -> None:
    async def main() -> None:
        async with serve([b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n" + ok(b"final")]) as (_, url):
            client = FastUpstream(url)
            response = await client.post("/a", b"", {})
            assert response.status_code == 200 and "link" not in response.headers
            assert await response.aread() == b"final"
            await client.aclose()

    run(main())


def test_a_large_answer_streams_through_backpressure() -> None:
    async def main() -> None:
        payload = bytes(range(256)) * 8192  # 2 MiB, well over the pause threshold
        async with serve([ok(payload)]) as (_, url):
            client = FastUpstream(url)
            response = await client.post("/a", b"", {})
            received = bytearray()
            async for chunk in response.aiter_raw():
                received += chunk
                await asyncio.sleep(0)  # a slow reader
            assert bytes(received) == payload
            await client.aclose()

    run(main())


def test_client_choice_follows_scheme_and_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvfence.gateway.policy.schema import BackendConfig
    from kvfence.gateway.transport.upstream import make_upstream_client

    def kind(url: str, http_client: str = "auto") -> str:
        async def main() -> str:
            client = make_upstream_client(BackendConfig.model_validate(
                {"name": "b", "url": url, "tier": "shared", "http_client": http_client}))
            await client.aclose()
            return client.kind

        return asyncio.run(main())

    monkeypatch.delenv("KVFENCE_GATEWAY_HTTP_CLIENT", raising=False)
    assert kind("http://127.0.0.1:8000/v1") == "fast"
    assert kind("https://api.example.com/v1") == "httpx"  # TLS is httpx's business
    assert kind("http://127.0.0.1:8000/v1", "httpx") == "httpx"
    monkeypatch.setenv("KVFENCE_GATEWAY_HTTP_CLIENT", "httpx")  # the whole-suite switch
    assert kind("http://127.0.0.1:8000/v1") == "httpx"
    monkeypatch.setenv("KVFENCE_GATEWAY_HTTP_CLIENT", "aiohttp")
    with pytest.raises(ConfigError, match="expected httpx or auto"):
        kind("http://127.0.0.1:8000/v1")
