"""Why an audit could not run.

Every such error maps to exit code 2 ("could not run"), as distinct from a finding (exit 1)::

    KvfenceError
    └── AuditCannotRun            the audit could not reach a verdict at all (exit code 2)
        ├── EndpointUnreachable   connection refused, DNS failure, timeout
        └── EndpointRejected      the endpoint answered, but not in a way the audit can use (401, 404 ...)
"""

from __future__ import annotations

from kvfence.errors import KvfenceError

__all__ = ["AuditCannotRun", "EndpointRejected", "EndpointUnreachable"]


class AuditCannotRun(KvfenceError):
    """The audit could not run to a verdict; the message says what to change."""

    exit_code = 2


class EndpointUnreachable(AuditCannotRun):
    """The endpoint could not be reached (connection refused, DNS, TLS, timeout)."""


class EndpointRejected(AuditCannotRun):
    """The endpoint answered with an error that stops the audit (bad key, unknown model, no such API)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
