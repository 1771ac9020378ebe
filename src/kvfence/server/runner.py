"""Run the server on kvfence's HTTP server (:mod:`kvfence.http`): secret, keys, app, and the exit
status of a failed start."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from typing import Any

from kvfence.engine.interface import Engine
from kvfence.errors import KvfenceError
from kvfence.http.server import HttpServer, LifespanFailed
from kvfence.http.server import run as run_http
from kvfence.listen import bind_listening_socket
from kvfence.server.app import create_app
from kvfence.server.auth.keys import KeyRing
from kvfence.server.auth.secret import load_server_secret
from kvfence.server.config import ServerConfig

__all__ = ["run_server"]

log = logging.getLogger("kvfence.server")


def run_server(config: ServerConfig, engine_config: Any, *, log_level: str = "info",
               disagg_config: Any | None = None) -> None:
    """Serve until Ctrl-C. A model that cannot load (e.g. I3: the advertised context does not fit
    the KV pool) stops the server and re-raises the error, so the CLI exits with its code."""
    secret = load_server_secret(config.secret_path)
    keyring = KeyRing(config.keys_path) if config.keys_path is not None else None
    if keyring is not None and len(keyring) == 0:
        log.warning("keys file %s has no keys yet: every request gets 401 until `kvfence keys add`",
                    config.keys_path)
    fatal: list[BaseException] = []
    server: HttpServer | None = None

    def on_fatal(exc: BaseException) -> None:
        fatal.append(exc)
        if server is not None:
            server.request_stop_threadsafe()

    def factory() -> Engine:  # mypy checks both engines against the typed seam here
        if disagg_config is not None:  # prefill in a worker process, verified KV handoff (I4)
            from kvfence.disagg.engine import DisaggregatedEngine

            return DisaggregatedEngine(disagg_config)
        from kvfence.engine.core.llm_engine import LLMEngine

        return LLMEngine(engine_config)

    # Bound before anything starts: a port in use is one error line and exit code 2, never
    # "listening on" followed by a failure of the server's own.
    sock = bind_listening_socket(config.host, config.port)
    port = sock.getsockname()[1]
    app = create_app(config, factory, secret=secret, keyring=keyring, on_fatal=on_fatal, freeze_heap=True)
    server = HttpServer(app, config=dataclasses.replace(config.http, max_body_bytes=config.max_body_bytes))
    log.info("listening on http://%s:%d (the model loads in the background; requests get 503 until then)",
             config.host, port)
    try:
        run_http(server, host=config.host, port=port, sock=sock,
                 use_uvloop=importlib.util.find_spec("uvloop") is not None)
    except LifespanFailed as failed:
        fatal.append(failed)
    finally:
        sock.close()
    if fatal:
        first = fatal[0]
        if isinstance(first, KvfenceError):
            raise first
        raise KvfenceError(f"the model could not be loaded: {type(first).__name__}: {first}") from first
