"""What a request may cost before it leaves: shape, length caps against real capacity, limits.

- ``request_shape.py``: a completion request's shape, checked before anything reads or forwards it;
- ``capacity.py``: a backend's advertised context against its real KV capacity (I3 at the gateway);
- ``tokens.py``, ``caps.py``, ``trim.py`` (pure): token counts, the cap, BM25 trimming of retrieved context;
- ``limits.py`` / ``limits_redis.py``: requests and tokens per minute and concurrency, in memory or Redis;
- ``usage.py``: what an answer cost, for the tokens-per-minute limit.
"""
