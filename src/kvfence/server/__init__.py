"""kvfence.server: ``kvfence serve``, the OpenAI-compatible server over the engine.

- ``auth/``: API keys to tenant identities and the server secret; the only source of a cache scope (I5);
- ``openai/``: the OpenAI endpoints: request models, serving, answer shapes;
- ``app.py``: the ASGI app (routes, ``/health``, ``/metrics``, capacity); ``runner.py``: runs it on :mod:`kvfence.http`;
- ``async_engine.py``: the engine loop on its own thread, requests admitted before scheduling (I3);
- ``config.py``, ``limits.py``, ``metrics.py``, ``api_errors.py``, ``cli.py``.
"""
