"""Bytes in and out: the HTTP servers the gateway answers on and the clients it forwards with.

- ``upstream.py``, ``fast_http.py``, ``fast_pool.py``: upstream clients (httpx, and a lean keep-alive client);
- ``lean_server.py``, ``lean_protocol.py``, ``lean_cycle.py``: the lean HTTP/1.1 server (``--server lean``);
- ``stream_out.py``, ``stream_end.py``, ``hang_up.py``: streaming answers out, truncation, client hang-ups;
- ``quiet_time.py``, ``timing_probe.py``: deferrable bookkeeping, and latency diagnosis (off by default).
"""
