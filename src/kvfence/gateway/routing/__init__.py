"""Where a request may go: routing by data class, and who shares a backend's prompt cache.

- ``classes.py`` (pure): which backends a data class may reach, in which order, and why not the others;
  a detector finding may raise a class, never lower it;
- ``cache_salt.py``: gateway-chosen salts (HMAC of the tenant scope), client salts stripped (I5 at the gateway).
"""
