"""Errors the gateway answers with: each carries its HTTP status and an OpenAI-style error code.

Every error here is one a caller or the policy can cause; each becomes an OpenAI-shaped JSON error
(``{"error": {"message", "type", "param", "code"}}``) so the official clients raise the matching
exception. Internal faults are logged and answered as 5xx, never as success::

    KvfenceError
    └── GatewayError                    500 gateway_error
        ├── GatewayRequestError         400 invalid_request_error
        │   ├── PromptTooLongError      400 context_length_exceeded (the cap, invariant I3 at the edge)
        │   ├── RequestBlocked          400 request_blocked (a protection hook refused the content)
        │   └── PayloadTooLarge         413 request_too_large
        ├── AuthenticationFailed        401 invalid_api_key
        ├── RouteDenied                 403 no_allowed_backend (the policy allows no backend: fail closed)
        ├── ModelNotFound               404 model_not_found
        ├── RateLimited                 429 rate_limit_exceeded / concurrency_limit_exceeded
        ├── LeakSuspected               502 cross_tenant_leak_suspected (answer withheld)
        ├── UpstreamUnavailable         503 backend_unavailable (every allowed backend failed)
        ├── LimitStoreUnavailable       503 rate_limit_store_unavailable (Redis down: limits not skipped)
        └── DetectorFailure             503 detector_failure (fail closed: never forwarded raw)
"""

from __future__ import annotations

from typing import Any

from kvfence.errors import KvfenceError
from kvfence.openai_wire import error_body

__all__ = [
    "AuthenticationFailed",
    "DetectorFailure",
    "GatewayError",
    "GatewayRequestError",
    "LeakSuspected",
    "LimitStoreUnavailable",
    "ModelNotFound",
    "PayloadTooLarge",
    "PromptTooLongError",
    "RateLimited",
    "RequestBlocked",
    "RouteDenied",
    "UpstreamUnavailable",
]


class GatewayError(KvfenceError):
    """Base of every error the gateway answers on purpose; ``status_code`` is the HTTP status."""

    status_code = 500
    error_type = "server_error"
    code = "gateway_error"

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def headers(self) -> dict[str, str]:
        """Extra response headers (``Retry-After`` and the like)."""
        return {}

    def to_body(self) -> dict[str, Any]:
        """The OpenAI-compatible error body."""
        return error_body(self.message, type=self.error_type, code=self.code, param=self.param)


class GatewayRequestError(GatewayError):
    """A request that cannot be served as sent."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class PromptTooLongError(GatewayRequestError):
    """Prompt (plus ``max_tokens``) over the cap: min(tenant/policy cap, the backend's real capacity)."""

    code = "context_length_exceeded"


class RequestBlocked(GatewayRequestError):
    """A protection hook refused to forward this content under the request's data class."""

    code = "request_blocked"


class PayloadTooLarge(GatewayRequestError):
    """A request body over ``gateway.max_body_bytes``."""

    status_code = 413
    code = "request_too_large"


class AuthenticationFailed(GatewayError):
    """Missing or unknown gateway API key."""

    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class RouteDenied(GatewayError):
    """The policy allows no backend for this request: the gateway fails closed and names why."""

    status_code = 403
    error_type = "permission_error"
    code = "no_allowed_backend"


class ModelNotFound(GatewayError):
    """No configured backend serves the requested model."""

    status_code = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class RateLimited(GatewayError):
    """A tenant limit (requests per minute, concurrent requests) was hit."""

    status_code = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after_s: float | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class LeakSuspected(GatewayError):
    """An answer carried another tenant's data: it is withheld and an incident is recorded."""

    status_code = 502
    code = "cross_tenant_leak_suspected"

    def __init__(self, incident_id: str, message: str) -> None:
        super().__init__(f"{message} (incident {incident_id})")
        self.incident_id = incident_id

    def to_body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.error_type, code=self.code, param=self.param,
                          incident_id=self.incident_id)


class UpstreamUnavailable(GatewayError):
    """Every backend the request's class allows failed or is down."""

    status_code = 503
    code = "backend_unavailable"


class LimitStoreUnavailable(GatewayError):
    """The shared rate-limit store cannot be reached: refuse rather than serve without limits."""

    status_code = 503
    code = "rate_limit_store_unavailable"


class DetectorFailure(GatewayError):
    """A detector errored or timed out: the request is refused rather than forwarded unscanned."""

    status_code = 503
    code = "detector_failure"
