"""``kvfence gateway --workers N``: several processes on one port, and what they must share.

- ``supervisor.py``: the worker processes and their supervisor;
- ``shared_state.py``: what several workers must share (Redis, PostgreSQL), checked before any starts;
- ``metrics.py``: ``/metrics`` summed over every worker, whichever worker is asked.
"""
