"""kvfence's one HTTP/1.1 server, for ``kvfence serve`` (disaggregated or not) and ``kvfence gateway``
(one process or ``--workers N``): asyncio + httptools (llhttp), no ASGI layers on the gateway's hot path.

Every connection is bounded (:class:`HttpConfig`, defaults in ``docs/http-limits.md``): the request
head's size and field count, the body's size, the time a head may take from its first byte, the
time a body may take after its head, and the time an idle connection is kept. A client over a limit
gets an OpenAI-shaped 408/413/431 and a closed connection before any app sees its request.

Why this server and not uvicorn: uvicorn reads a request head whole (no size bound with httptools)
and has no head or body timeout. And at 100 concurrent streams the gateway's CPU per streamed chunk was mostly uvicorn's ASGI ``send``
path (message dicts, checks, flow-control wrappers), and on a machine whose cores are shared with the
backend every extra microsecond per chunk is queueing at p99. Here ``POST /v1/chat/completions`` and
``/v1/completions`` go straight to the request path (``GatewayApp.completion_response``), and a
relayed stream (``stream_out.RelayStream``) is written from the upstream connection's read callback
to the client's transport with chunked framing and nothing else. Every other request, and answers
that are not relayed, go through plain ASGI to the same app, so routes, errors and lifespan are the
app's own.

Lifecycle: the app's lifespan starts (the runtime opens its pools) before the port opens; SIGTERM or
SIGINT stops accepting, closes idle connections, lets answers in progress finish for
``graceful_timeout_s`` (a second signal cuts that short), then closes what is left (each such stream
ends as a client hang-up: upstream closed, limits released, audit row written) and runs the
lifespan's shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope

from kvfence.errors import ConfigError, KvfenceError
from kvfence.http.connection import HttpConnection
from kvfence.http.cycle import RequestCycle

__all__ = ["HotPath", "HttpConfig", "HttpServer", "LifespanFailed", "run"]

log = logging.getLogger("kvfence.gateway")

# The answer to a request, as a Response object, when the hot path serves it; None sends the
# request to the ASGI app.
HotPath = Callable[[Scope, Receive], Awaitable[Response | None]]


@dataclass(frozen=True)
class HttpConfig:
    """Limits and timeouts of every connection (the defaults are the CLI's and the policy's)."""

    # An idle keep-alive connection (and a new one that has sent nothing yet) is closed after this;
    # longer than clients keep idle connections (httpx/openai: 5 s), so a client never sends a request
    # on a connection the server is closing at that moment.
    idle_timeout_s: float = 15.0
    head_timeout_s: float = 10.0  # from a request's first byte to the end of its head (slowloris)
    body_timeout_s: float = 30.0  # from the end of the head to the end of the body (slow bodies)
    max_head_bytes: int = 64 * 1024  # request line plus header fields
    max_headers: int = 100
    max_body_bytes: int = 32 * 1024 * 1024
    graceful_timeout_s: float = 30.0
    backlog: int = 2048

    def __post_init__(self) -> None:
        for name in ("idle_timeout_s", "head_timeout_s", "body_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name.replace('_', '-')} must be above 0 seconds, got {getattr(self, name)}")
        if self.max_head_bytes < 1024:
            raise ConfigError(f"max-head-bytes must be at least 1024, got {self.max_head_bytes}")
        if self.max_headers < 8:
            raise ConfigError(f"max-headers must be at least 8, got {self.max_headers}")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"max-body-bytes must be at least 1024, got {self.max_body_bytes}")
        if self.graceful_timeout_s < 0:
            raise ConfigError(f"graceful-timeout must be >= 0, got {self.graceful_timeout_s}")


class LifespanFailed(KvfenceError):
    """The app's lifespan startup failed: the server does not open its port."""

    exit_code = 3


class HttpServer:
    """Serves one ASGI app (and its hot path) until :meth:`request_stop` or a signal."""

    def __init__(self, app: ASGIApp, *, hot: HotPath | None = None, config: HttpConfig | None = None) -> None:
        self.app = app
        self.hot = hot
        self.config = config or HttpConfig()
        self.connections: set[HttpConnection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.state: dict[str, Any] = {}  # the lifespan's state, copied into each request's scope
        self.bound: tuple[str, int] | None = None
        self._date = b""
        self._date_second = -1
        self._stop: asyncio.Event | None = None
        self._force: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def date_header(self) -> bytes:
        now = int(time.time())
        if now != self._date_second:
            self._date_second = now
            self._date = b"date: %s\r\n" % email.utils.formatdate(now, usegmt=True).encode("ascii")
        return self._date

    async def handle(self, cycle: RequestCycle) -> None:
        """Answer one request: the hot path when it takes it, else the ASGI app."""
        scope = cycle.scope
        if self.hot is not None and scope["method"] == "POST":
            response = await self.hot(scope, cycle.receive)
            if response is not None:
                relay_direct = getattr(response, "relay_direct", None)  # stream_out.RelayStream
                if relay_direct is not None:
                    await relay_direct(cycle, cycle.receive)
                else:
                    await response(scope, cycle.receive, cycle.send)
                return
        await self.app(scope, cycle.receive, cycle.send)

    def request_stop(self) -> None:
        """Begin a graceful shutdown; a second call cuts the grace period short."""
        if self._stop is None or self._force is None:
            return
        if self._stop.is_set():
            self._force.set()
        self._stop.set()

    def request_stop_threadsafe(self) -> None:
        """:meth:`request_stop` from another thread (e.g. a model loader that failed)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.request_stop)

    async def serve(self, host: str = "127.0.0.1", port: int = 8080, *, sock: socket.socket | None = None,
                    ready: Callable[[], None] | None = None, signals: bool = True) -> None:
        """Run the lifespan, listen, serve until stopped, shut down gracefully."""
        loop = self._loop = asyncio.get_running_loop()
        self._stop, self._force = asyncio.Event(), asyncio.Event()
        lifespan = _Lifespan(self.app, self.state)
        await lifespan.startup()
        if signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
        try:
            if sock is not None:
                server = await loop.create_server(lambda: HttpConnection(self), sock=sock, backlog=self.config.backlog)
            else:
                server = await loop.create_server(lambda: HttpConnection(self), host, port,
                                                  backlog=self.config.backlog, reuse_address=True)
            name = server.sockets[0].getsockname()
            self.bound = (str(name[0]), int(name[1]))
            if ready is not None:
                ready()
            try:
                await self._stop.wait()
            finally:
                server.close()
                await self._drain()
        finally:
            if signals:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(signum)
            await lifespan.shutdown()

    async def _drain(self) -> None:
        for conn in list(self.connections):
            conn.shutdown()
        assert self._force is not None
        deadline = time.monotonic() + self.config.graceful_timeout_s
        while self.connections and not self._force.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._force.wait(), min(0.05, max(0.0, deadline - time.monotonic())))
        for conn in list(self.connections):
            conn.abort(force=True)  # its request sees a hang-up and ends as one (upstream closed, limits released)
        if self.tasks:
            _, pending = await asyncio.wait(set(self.tasks), timeout=5.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5.0)


class _Lifespan:
    """Drives the app's ASGI lifespan: startup before serving, shutdown after."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self._app = app
        self._state = state
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._events: dict[str, asyncio.Future[str | None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._supported = True

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        self._events = {"startup": loop.create_future(), "shutdown": loop.create_future()}
        self._task = loop.create_task(self._main())
        failure = await self._exchange("startup")
        if failure is not None:
            raise LifespanFailed(f"the gateway did not start: {failure}")

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        failure = await self._exchange("shutdown")
        if failure is not None:
            log.error("lifespan shutdown failed: %s", failure)

    async def _exchange(self, phase: str) -> str | None:
        await self._inbox.put({"type": f"lifespan.{phase}"})
        return await self._events[phase]

    async def _main(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self._state}
        failure: str | None = None
        try:
            await self._app(scope, self._inbox.get, self._send)
        except BaseException as exc:  # the app's own failure: reported by startup()/shutdown()
            failure = f"{type(exc).__name__}: {exc}"
            if not self._events["startup"].done():
                log.error("lifespan startup failed", exc_info=exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            for future in self._events.values():
                if not future.done():
                    future.set_result(failure or "the app's lifespan ended early")

    async def _send(self, message: Message) -> None:
        phase, _, outcome = message["type"].removeprefix("lifespan.").partition(".")
        future = self._events.get(phase)
        if future is not None and not future.done():
            future.set_result(None if outcome == "complete" else str(message.get("message", "failed")))


def run(app: ASGIApp | HttpServer, *, hot: HotPath | None = None, host: str, port: int,
        config: HttpConfig | None = None, use_uvloop: bool = True, sock: socket.socket | None = None) -> None:
    """Serve ``app`` (or an :class:`HttpServer` built beforehand) on ``host:port`` (or on the listening
    ``sock``: a worker's) until SIGTERM/SIGINT: the ``kvfence serve`` and ``kvfence gateway`` processes."""
    factory = None
    if use_uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    server = app if isinstance(app, HttpServer) else HttpServer(app, hot=hot, config=config)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(server.serve(host, port, sock=sock))
