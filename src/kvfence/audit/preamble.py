"""What every request-sending check learns first: model, API, advertised context, tokens per letter.

One place for the start-up that ``admission``, ``leak`` and ``cache-sharing`` share, so they
discover the endpoint the same way and report it under the same parameter names.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from kvfence.audit.client import EndpointClient
from kvfence.audit.discovery import advertised_context, calibrate
from kvfence.audit.prompts import TokenModel
from kvfence.audit.target import Api

__all__ = ["CheckSetup", "prepare_check"]


@dataclass(slots=True)
class CheckSetup:
    """The endpoint facts a check starts from, and its random generator and clock."""

    rng: random.Random
    model: str
    api: Api
    max_context: int | None
    context_source: str
    token_model: TokenModel
    calibration: str
    calibrated: bool  # False: the endpoint reports no usage.prompt_tokens, sizes are an assumption
    started: float = field(default_factory=time.perf_counter)

    def parameters(self) -> dict[str, Any]:
        """The discovery facts every check's report lists."""
        return {
            "api": self.api.value,
            "max_context": self.max_context,
            "max_context_source": self.context_source,
            "token_calibration": self.calibration,
            "tokens_per_letter": round(self.token_model.tokens_per_unit, 4),
        }

    def elapsed(self) -> float:
        return round(time.perf_counter() - self.started, 3)


async def prepare_check(client: EndpointClient, seed: int | None) -> CheckSetup:
    """Resolve the model and API, read the advertised context, fit tokens per letter (as tenant A)."""
    started = time.perf_counter()
    rng = random.Random(seed)
    target = client.target
    model = await client.resolve_model()
    api = await client.resolve_api()
    max_context, context_source = await advertised_context(client, target.max_context)
    token_model, calibration, calibrated = await calibrate(client, target.tenant_a, rng, max_context)
    return CheckSetup(rng=rng, model=model, api=api, max_context=max_context, context_source=context_source,
                      token_model=token_model, calibration=calibration, calibrated=calibrated, started=started)
