"""Bytes in and out: the clients the gateway forwards with, and its streams (the server it answers on is
:mod:`kvfence.http`, shared with ``kvfence serve``).

- ``upstream.py``, ``fast_http.py``, ``fast_pool.py``: upstream clients (httpx, and a lean keep-alive client);
- ``stream_out.py``, ``stream_end.py``, ``hang_up.py``: streaming answers out, truncation, client hang-ups;
- ``quiet_time.py``: deferrable bookkeeping.
"""
