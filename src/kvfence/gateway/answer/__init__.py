"""The answer path: upstream answers back to the caller through the hooks' filters.

- ``relay.py``: whole or streamed answers, errors fail closed (never an answer billed as success);
- ``filter.py``: the hooks' response filters on every answer field, streamed (SSE) or whole;
- ``logprobs.py``: per-token ``logprobs`` through the hooks' token restorers.
"""
