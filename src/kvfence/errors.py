"""The kvfence exception hierarchy.

Every error a user can cause is a :class:`KvfenceError` with a message that says what to change.
Lower-level errors are translated at one boundary with ``raise ... from exc``::

    KvfenceError
    ├── ConfigError              invalid configuration or command-line option (exit code 2)
    │   └── ModelLoadError       model directory missing, incomplete or unsupported
    ├── RequestError             a request that cannot be served as sent (HTTP 400)
    │   ├── InvalidParameterError   a sampling or request field out of range
    │   └── ContextLengthExceededError   prompt + max_tokens cannot fit (I3)
    ├── CapacityError            the KV pool cannot hold what was asked (I3)
    └── IsolationViolation       an isolation invariant (I1-I6) was about to be broken
"""

from __future__ import annotations

__all__ = [
    "CapacityError",
    "ConfigError",
    "ContextLengthExceededError",
    "InvalidParameterError",
    "IsolationViolation",
    "KvfenceError",
    "ModelLoadError",
    "RequestError",
]


class KvfenceError(Exception):
    """Base class of every error kvfence raises on purpose."""

    exit_code = 1


class ConfigError(KvfenceError):
    """Invalid configuration: the message names the option and what to change."""

    exit_code = 2


class ModelLoadError(ConfigError):
    """A model directory that cannot be loaded: missing file, unsupported architecture, bad weights."""


class RequestError(KvfenceError):
    """A request that cannot be served as sent; maps to HTTP 400."""

    status_code = 400
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidParameterError(RequestError):
    """A request or sampling parameter outside its valid range."""

    code = "invalid_parameter"


class ContextLengthExceededError(RequestError):
    """Prompt plus ``max_tokens`` exceed the maximum context (invariant I3); nothing was allocated."""

    code = "context_length_exceeded"


class CapacityError(KvfenceError):
    """The KV pool cannot hold what the configuration advertises (invariant I3)."""

    exit_code = 2


class IsolationViolation(KvfenceError):
    """An isolation invariant of DESIGN.md (I1-I6) was about to be broken; the request is aborted."""
