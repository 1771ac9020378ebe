"""``/v1/embeddings`` through the gateway: text inputs only, each capped, nothing to restore.

Token-id inputs are refused (a detector cannot read them). Each input is scanned; the class's
``protection.embeddings`` action (block, pass or pseudonymise; else its per-entity actions) applies
to what is found: a pseudonymised input is embedded with its placeholders, so its vector stands for
"an e-mail address" rather than that address (the semantic cost, docs/apis.md). Each input must fit
the backend's context (``admission/caps.py``). The answer is vectors: no model text to filter.
"""

from __future__ import annotations

from typing import Any

from kvfence.apis import embeddings as api
from kvfence.errors import RequestError
from kvfence.gateway.apis.base import ApiCall, request_error
from kvfence.gateway.policy.schema import BackendConfig

__all__ = ["EmbeddingsCall"]


class EmbeddingsCall(ApiCall):
    endpoint = "embeddings"
    streams = False

    def check(self, body: dict[str, Any]) -> None:
        try:
            api.EmbeddingsRequest.parse(body)
        except RequestError as exc:
            raise request_error(exc) from None

    def upstream(self, backend: BackendConfig, body: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
        return "/embeddings", body, {}
