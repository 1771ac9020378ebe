"""kvfence.http: the one HTTP/1.1 server every kvfence process listens with (``kvfence serve``, its
disaggregated mode, ``kvfence gateway`` and each of its ``--workers``).

- ``server.py``: :class:`HttpServer` (lifespan, listening, graceful shutdown) and :class:`HttpConfig`,
  the limits every connection is held to: head size and field count, body size, head/body/idle timeouts;
- ``connection.py``: one connection: httptools parsing, the limits enforced, pipelining, back-pressure;
- ``cycle.py``: one request's ASGI ``receive``/``send`` and response framing;
- ``tcp.py``: ``TCP_NODELAY`` on every connection, accepted or opened (no Nagle wait on streamed events);
- ``timing_probe.py``: per-request timestamps for latency diagnosis (off by default).

The OpenAI error body and SSE framing both servers answer with are :mod:`kvfence.openai_wire`.
"""
