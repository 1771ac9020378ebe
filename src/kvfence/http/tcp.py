"""``TCP_NODELAY`` on every connection kvfence's HTTP server accepts and its lean client opens.

Answers stream as small writes (one SSE event per token). Under Nagle's algorithm every write after
the first waits until the peer has acknowledged the one before, and a peer that delays its
acknowledgements (Linux: up to 40 ms) holds each event that long. uvloop sets ``TCP_NODELAY`` on
every TCP transport; asyncio's own event loop only on sockets whose ``proto`` is ``IPPROTO_TCP``. A
socket made by ``socket.socket(family, SOCK_STREAM)`` has ``proto`` 0, and that is what
``kvfence serve`` and ``kvfence gateway`` hand the server (``kvfence.listen``, the ``--workers``
sockets): on asyncio's loop their accepted connections kept Nagle on. So the connection sets it
itself, whatever the loop and whoever made the listening socket.
"""

from __future__ import annotations

import contextlib
import socket
from asyncio import BaseTransport

__all__ = ["set_nodelay"]

_TCP_FAMILIES = frozenset({socket.AF_INET, socket.AF_INET6})


def set_nodelay(transport: BaseTransport) -> None:
    """Turn Nagle's algorithm off on ``transport``'s socket (nothing for a non-TCP socket)."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in _TCP_FAMILIES:
        return
    with contextlib.suppress(OSError):  # the peer may be gone already: its connection_lost follows
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
