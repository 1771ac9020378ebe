"""Bind the listening socket before a server starts, so that a port in use is one clear error.

uvicorn reports a failed bind as a log line and an exit status of its own, after kvfence has
already said it is listening; the lean gateway server raised ``OSError`` with a traceback. Binding
here first turns every such failure into a :class:`ConfigError` (exit code 2) that names the
address and what to change, and lets the start-up line carry the real port (``--port 0``).
"""

from __future__ import annotations

import errno
import socket

from kvfence.errors import ConfigError

__all__ = ["bind_error", "bind_listening_socket"]


def bind_listening_socket(host: str, port: int, *, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening; raises ConfigError when that cannot be done."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise bind_error(host, port, exc) from exc
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restart over TIME_WAIT
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise bind_error(host, port, exc) from exc
    sock.set_inheritable(True)
    return sock


def bind_error(host: str, port: int, exc: OSError) -> ConfigError:
    """What to tell the user when ``host:port`` cannot be bound (``exc`` from ``bind`` or ``getaddrinfo``)."""
    if isinstance(exc, socket.gaierror):
        return ConfigError(f"--host {host}: cannot resolve it to an address ({exc.strerror})")
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"cannot listen on {host}:{port}: the address is already in use "
                           "(another server on that port?); choose another --port")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"cannot listen on {host}:{port}: {host} is not an address of this machine (--host)")
    if exc.errno == errno.EACCES:
        return ConfigError(f"cannot listen on {host}:{port}: permission denied "
                           "(ports below 1024 need privileges); choose another --port")
    return ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
