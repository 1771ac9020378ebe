"""kvfence.gateway: a tenant-aware proxy in front of any OpenAI-compatible backend.

Request path, in order (each module one idea; the pure ones do no I/O and are tested on plain data):

- ``policy.py`` / ``policy_loader.py``: the typed policy file, validated once with line numbers;
- ``tenants.py``: hashed API keys -> tenant; ``limits.py``: requests/min and concurrency (memory or Redis);
- ``hooks.py``: the interface data protection (``protection/``) plugs into;
- ``routing.py`` (pure): which backends a data class may reach, and why not the others;
- ``accounts.py``: upstream credentials per backend / organisation / tenant;
- ``capacity.py``: advertised context vs. real KV capacity, discovered from the backend;
- ``tokens.py``, ``caps.py``, ``trim.py`` (pure): token counts, length caps, BM25 trimming;
- ``cache_salt.py``: gateway-chosen salts, client salts stripped (invariant I5 at the gateway);
- ``proxy.py``: the request path; ``answer.py`` + ``answer_filter.py``: the answer path;
- ``audit_log.py`` + ``trace.py``: one row per request, no prompt text; ``metrics.py``: Prometheus;
- ``runtime.py``: the state of one running gateway; ``app.py``: ASGI routes; ``cli.py``: ``kvfence gateway``.
"""
