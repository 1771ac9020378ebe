"""The API surface the gateway accepts: one allowlist request model per endpoint.

- ``request_model.py``: the framework (handling markers on every field, :func:`admit`,
  :func:`scan_plan`, the registry);
- ``openai_chat.py``: ``/v1/chat/completions`` and ``/v1/completions`` (OpenAI's shapes plus the
  vLLM / SGLang extras a backend honours), registered on import.

Invariant: every byte that reaches a backend is scanned, passed as named structure, or refused or
dropped by policy; nothing unknown is forwarded.
"""

from kvfence.gateway.api import openai_chat as openai_chat  # registers its endpoints
from kvfence.gateway.api.request_model import admit, register, scan_plan

__all__ = ["admit", "register", "scan_plan"]
