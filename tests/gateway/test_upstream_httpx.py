"""HttpxResponse: the httpx upstream's answer, read as before, freed without the cyclic collector."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import httpx

from kvfence.gateway.transport.upstream import HttpxResponse

_SSE = b'data: {"choices":[]}\n\ndata: [DONE]\n\n'


class _Chunks(httpx.AsyncByteStream):
    """An answer that arrives in two pieces, as a streamed one does."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield _SSE[:12]
        yield _SSE[12:]


def _client() -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Chunks())

    return httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://backend.test")


async def _one(client: httpx.AsyncClient, *, stream: bool) -> bytes:
    request = client.build_request("POST", "/v1/chat/completions", content=b"{}")
    response = HttpxResponse(await client.send(request, stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    try:
        if stream:
            return b"".join([chunk async for chunk in response.aiter_raw()])
        return await response.aread()
    finally:
        await response.aclose()


def test_the_answer_reads_as_httpx_gives_it() -> None:
    async def main() -> tuple[bytes, bytes]:
        async with _client() as client:
            return await _one(client, stream=True), await _one(client, stream=False)

    assert asyncio.run(main()) == (_SSE, _SSE)


def test_a_closed_answer_leaves_no_reference_cycle() -> None:
    """An open httpx response and its stream refer to each other; the wrapper drops the stream on
    close so the request's objects go with their last reference, not at the next collection."""

    async def main() -> int:
        async with _client() as client:
            await _one(client, stream=True)  # warm up
            gc.collect()
            gc.disable()
            try:
                for index in range(20):
                    await _one(client, stream=index % 2 == 0)
                return gc.collect()
            finally:
                gc.enable()

    assert asyncio.run(main()) == 0
