"""Upstream HTTP clients: what the gateway forwards completions with.

Two clients with one small interface (:class:`UpstreamClient`: POST a body, stream the answer back):

- :class:`HttpxUpstream` wraps ``httpx.AsyncClient``: https upstreams, and any backend whose policy
  says ``http_client: httpx``;
- :class:`FastUpstream` (``fast_pool.py`` over ``fast_http.py``) speaks plain HTTP/1.1 over asyncio
  with the httptools parser, for ``http://`` upstreams by default (``http_client: auto``). Per
  streamed completion httpx costs milliseconds of CPU (httpcore, h11 and anyio layers per chunk; its
  pool scans every connection per request, ~25 ms at 100 busy connections), which was most of the
  gateway's overhead; the fast client does the same work in a fraction of that (docs/guide/gateway.md, "Overhead").

Both raise httpx's exception types (``httpx.ConnectError``, ``httpx.ReadTimeout``,
``httpx.RemoteProtocolError`` ...), so the request path treats them alike. Only the
:data:`NOT_SENT_ERRORS` prove that no byte of the request was written (no connection, or none free;
a pooled connection found closed is dropped before anything is written to it, by both clients): any
other failure may come after the backend read the request and began to generate, so the request
path never sends it to that backend again and lets at most one other backend have it (no request
amplification: one client request is never several billed generations).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

import httpx

from kvfence.errors import ConfigError
from kvfence.gateway.policy.schema import BackendConfig

__all__ = ["FORCE_HTTPX_ENV", "NOT_SENT_ERRORS", "HttpxResponse", "HttpxUpstream", "UpstreamClient", "UpstreamResponse",
           "make_upstream_client"]

# Raised before any byte of the request was written (connect failure or timeout, no free connection,
# a header that cannot be encoded); see the module docstring.
NOT_SENT_ERRORS: tuple[type[httpx.HTTPError], ...] = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout,
                                                      httpx.LocalProtocolError, httpx.UnsupportedProtocol)


class UpstreamResponse(Protocol):
    """An upstream answer whose body has not been read yet (``httpx.Response`` is one)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...  # keys compare case-insensitively or are lower case

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


class UpstreamClient(Protocol):
    """A pooled client for one backend's base URL."""

    kind: str

    async def post(self, path: str, content: bytes, headers: Mapping[str, str]) -> UpstreamResponse:
        """POST ``content`` to base URL + ``path``; return once the response headers are in."""
        ...

    async def aclose(self) -> None: ...


class HttpxUpstream:
    """``httpx.AsyncClient`` with the backend's pool size and timeouts."""

    kind = "httpx"

    def __init__(self, backend: BackendConfig) -> None:
        timeout = httpx.Timeout(backend.read_timeout_s, connect=backend.connect_timeout_s, pool=10.0)
        limits = httpx.Limits(max_connections=backend.max_connections,
                              max_keepalive_connections=backend.max_connections,
                              keepalive_expiry=4.0)  # under the 5 s idle timeout of uvicorn-based engines (vLLM, kvfence)
        self._client = httpx.AsyncClient(base_url=backend.base_url, timeout=timeout, limits=limits,
                                         trust_env=False, follow_redirects=False)

    async def post(self, path: str, content: bytes, headers: Mapping[str, str]) -> HttpxResponse:
        request = self._client.build_request("POST", path, content=content, headers=dict(headers))
        return HttpxResponse(await self._client.send(request, stream=True))

    async def aclose(self) -> None:
        await self._client.aclose()


class HttpxResponse:
    """An ``httpx.Response`` that, once closed, lets go of its stream.

    An open httpx response and its stream refer to each other (and through the stream to httpcore's
    connection objects): a reference cycle of about thirty objects per request, left for the cyclic
    collector, whose collections are pauses every stream in flight waits through. Dropping the stream
    on close frees them as soon as the request ends."""

    __slots__ = ("_response",)

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    @property
    def status_code(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self._response.headers

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._response.aiter_raw()

    async def aread(self) -> bytes:
        return await self._response.aread()

    async def aclose(self) -> None:
        response = self._response
        try:
            await response.aclose()
        finally:
            response.stream = _CLOSED_STREAM


_CLOSED_STREAM = httpx.ByteStream(b"")


# Set to "httpx" to put every backend on httpx whatever the policy says: a switch for ruling the lean
# client out when chasing a problem, and how the whole test suite is run against httpx as well.
FORCE_HTTPX_ENV = "KVFENCE_GATEWAY_HTTP_CLIENT"


def make_upstream_client(backend: BackendConfig) -> UpstreamClient:
    """The fast client for plain-http backends (unless the policy asks for httpx), httpx otherwise."""
    forced = os.environ.get(FORCE_HTTPX_ENV, "").strip().lower()
    if forced not in ("", "auto", "httpx"):
        raise ConfigError(f"{FORCE_HTTPX_ENV}={forced!r}: expected httpx or auto")
    if forced == "httpx" or backend.http_client == "httpx" or not backend.base_url.startswith("http://"):
        return HttpxUpstream(backend)
    from kvfence.gateway.transport.fast_pool import FastUpstream

    return FastUpstream(backend.base_url, connect_timeout_s=backend.connect_timeout_s,
                        read_timeout_s=backend.read_timeout_s, max_connections=backend.max_connections)
