"""The policy a gateway runs under: typed, validated once at start-up, with file:line errors.

- ``schema.py``: data classes, backends with their vendor facts, tenants, gateway settings (pydantic);
- ``loader.py``: YAML to :class:`~kvfence.gateway.policy.schema.Policy`, each problem with its line and field;
- ``tenants.py``: API keys, stored only as SHA-256, to organisation / workspace / class / limits;
- ``accounts.py``: which upstream account a tenant's requests use on each backend;
- ``plans.py``: decisions that depend only on who asks and where it goes, made once and reused.
"""
