"""Pseudonymisation: stable placeholders out, the caller's values back in every answer slot.

- ``placeholders.py``: a placeholder per finding, and its restoration (secrets are never restored);
- ``streaming.py``: restoration in a stream where a placeholder is split across chunks;
- ``token_restore.py``: the same inside per-token fields (``logprobs``);
- ``forms.py``: the spellings a model writes a placeholder in (JSON- or HTML-escaped) and the value's;
- ``slot_syntax.py``: the syntax of the slot a value goes back into (prose, a JSON string, a JSON document).
"""
