"""A raw-socket backend for attack tests: the test writes every byte of each answer itself.

Real servers never send a cut-short body, a close-framed stream held open after ``[DONE]``, or
``data:`` without its space; these tests need a backend that does, so it is a bare socket: it reads
one HTTP request per connection, answers a non-POST (a port probe, a discovery ``GET``) with a 404,
hands the last chat message's text to the test's ``answer`` and closes the connection after it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator

__all__ = ["read_request", "serve_raw"]

Answer = Callable[[socket.socket, str], None]
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def read_request(conn: socket.socket) -> tuple[bytes, bytes] | None:
    """One request's head and body (by its Content-Length), or None when the peer sent nothing."""
    request = b""
    while b"\r\n\r\n" not in request:
        data = conn.recv(65536)
        if not data:
            return None  # a port probe: connected and left
        request += data
    head, _, body = request.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return head, body


def _handle(conn: socket.socket, answer: Answer) -> None:
    with conn:
        request = read_request(conn)
        if request is None:
            return
        head, body = request
        if not head.startswith(b"POST"):
            conn.sendall(_NOT_FOUND)
            return
        answer(conn, json.loads(body)["messages"][-1]["content"])


def _accept(sock: socket.socket, answer: Answer) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return  # closed: the test is over
        threading.Thread(target=_handle, args=(conn, answer), daemon=True).start()


@contextlib.contextmanager
def serve_raw(answer: Answer) -> Iterator[int]:
    """Serve ``answer`` on a loopback port (yielded) until the block ends."""
    sock = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_accept, args=(sock, answer), daemon=True).start()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()
