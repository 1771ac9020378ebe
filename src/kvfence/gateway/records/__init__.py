"""What a gateway leaves behind: the audit log, one trace per request, Prometheus metrics. Never text.

- ``audit_log.py``: routing decisions and incidents (SQLite or PostgreSQL), no prompt or answer text;
- ``trace.py``: one request's row: who, which class, where it went, the caps;
- ``metrics.py``: the gateway's Prometheus registry.
"""
