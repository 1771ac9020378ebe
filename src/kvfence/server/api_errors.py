"""HTTP errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Every failure the server answers goes through :class:`APIError`, so a client never sees a stack
trace and never a 200 for a request that failed. Engine errors (:mod:`kvfence.errors`) are
translated here, at one boundary.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from kvfence.errors import ContextLengthExceededError, RequestError
from kvfence.openai_wire import error_body

__all__ = ["APIError", "from_request_error"]


class APIError(Exception):
    """An error answer: HTTP status plus OpenAI's error fields and a metrics reason."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}
        # The label under which this rejection is counted in /metrics.
        self.reason = reason or code or type

    def payload(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, code=self.code, param=self.param)

    def response(self) -> JSONResponse:
        return JSONResponse(self.payload(), status_code=self.status_code, headers=self.headers)

    # Constructors for the errors the API answers, so each status/code pair lives in one place.

    @classmethod
    def bad_request(cls, message: str, *, param: str | None = None, code: str | None = None) -> APIError:
        return cls(400, message, code=code, param=param, reason=code or "invalid_request")

    @classmethod
    def unauthorized(cls, message: str) -> APIError:
        return cls(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"},
                   reason="unauthorized")

    @classmethod
    def not_found(cls, message: str) -> APIError:
        return cls(404, message, code="not_found", reason="not_found")

    @classmethod
    def too_many_requests(cls, message: str, *, code: str) -> APIError:
        return cls(429, message, type="rate_limit_error", code=code, headers={"Retry-After": "1"},
                   reason=code)

    @classmethod
    def unavailable(cls, message: str, *, code: str = "model_loading") -> APIError:
        return cls(503, message, type="service_unavailable_error", code=code, headers={"Retry-After": "5"},
                   reason=code)

    @classmethod
    def internal(cls, message: str = "internal server error; the request was aborted") -> APIError:
        return cls(500, message, type="server_error", code="internal_error", reason="internal_error")


def from_request_error(exc: RequestError) -> APIError:
    """Translate an engine-side request error (I3 admission, parameter validation) into HTTP 400."""
    code = exc.code
    if isinstance(exc, ContextLengthExceededError):
        code = "context_length_exceeded"
    return APIError(exc.status_code, exc.message, code=code, param=exc.param, reason=code or "invalid_request")
