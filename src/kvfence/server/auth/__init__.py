"""Who is asking: API keys to tenant identities, the server secret that keys cache scopes (I5).

- ``middleware.py``: ``Authorization: Bearer`` to a tenant, as pure ASGI middleware: the only source of a
  request's cache scope;
- ``keys.py``: the TOML key file (SHA-256 hashes to identities); ``secret.py``: the server secret;
- ``metrics_access.py``: who may read ``/metrics``, and which view of it.
"""
