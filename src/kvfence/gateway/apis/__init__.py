"""kvfence.gateway.apis: one thin adapter per API besides chat and completions, one pipeline for all.

Every API runs the same request path (``proxy.py``: tenant, limits, protection hooks, class and
routing, caps, salt, audit, metrics) and the same answer path (``answer/relay.py``: the hooks'
filters, usage, the fail-closed ends). An adapter only says what differs:

- where the request's text lives (``kvfence.apis.*.text_paths``, read by the protection hook) and how
  many tokens its prompt is (``admission/api_counts.py``);
- its allowlist request model and its refusals (``previous_response_id`` / ``store`` by policy);
- which backends can take it (``BackendConfig.apis``), the upstream path, and whether the body is
  translated (Messages to chat for an openai-only backend);
- which answer fields and stream events carry model text (each a filtered slot, at every split) and
  its error shape.

Modules: ``base.py`` (the interface, slot chains, named SSE events), ``responses.py``,
``messages.py`` (native, or translated to chat), ``embeddings.py``, ``chat_via_messages.py`` (a chat
request for a backend that speaks only Anthropic's API); ``request_model.py`` (the allowlist framework:
a handling marker on every field, ``admit`` and ``scan_plan``) and ``openai_chat.py`` (its models of
chat and completions, registered on import).
"""

from __future__ import annotations

from kvfence.gateway.apis import openai_chat as openai_chat  # registers the chat and completions models
from kvfence.gateway.apis.base import API_PATHS, ApiCall, new_call

__all__ = ["API_PATHS", "ApiCall", "new_call"]
