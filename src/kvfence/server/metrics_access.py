"""Who may read ``/metrics``, and which view of it.

The full exposition labels series by organisation (requests, tokens, prefix-cache hits per scope):
anyone who reaches the port would learn which organisations use the server and how much. So:

- ``--metrics-key-file PATH`` set: ``/metrics`` demands ``Authorization: Bearer <that key>`` and
  answers the full, per-organisation view; anything else is a 401. Tenant API keys do not open it:
  a tenant must not see the other tenants.
- no metrics key, API keys on: every caller gets the aggregate view, in which each per-tenant
  series is summed over its ``organization`` and ``scope`` labels (totals a scraper can still alert
  on; no organisation name, no scope id).
- ``--no-auth`` (one local tenant): the full view, there is nobody else to hide.

The key file holds the token itself (as Prometheus' ``credentials_file`` does), so one file serves
both sides; the server keeps only its SHA-256 and compares digests in constant time.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from pathlib import Path

from starlette.types import Scope

from kvfence.errors import ConfigError
from kvfence.server.api_errors import APIError
from kvfence.server.auth import bearer_token

__all__ = ["MIN_METRICS_KEY_CHARS", "MetricsAccess", "MetricsView", "read_metrics_key"]

MIN_METRICS_KEY_CHARS = 16


class MetricsView(enum.Enum):
    """What one ``/metrics`` caller may see."""

    FULL = "full"  # per-organisation labels
    AGGREGATE = "aggregate"  # summed over organisations and scopes


def read_metrics_key(path: Path) -> bytes:
    """The SHA-256 of the token in ``path`` (surrounding whitespace ignored); a clear error if unusable."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--metrics-key-file {path}: cannot read it: {exc}") from exc
    if len(token) < MIN_METRICS_KEY_CHARS or any(c.isspace() for c in token):
        raise ConfigError(
            f"--metrics-key-file {path}: the key must be one word of at least {MIN_METRICS_KEY_CHARS} characters, "
            "e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))' > FILE`"
        )
    return hashlib.sha256(token.encode("utf-8")).digest()


class MetricsAccess:
    """Decides the view of each ``/metrics`` request (see the module docstring)."""

    def __init__(self, *, key_digest: bytes | None, tenants_authenticated: bool) -> None:
        self.key_digest = key_digest
        self.tenants_authenticated = tenants_authenticated

    @property
    def is_locked(self) -> bool:
        return self.key_digest is not None

    def view(self, scope: Scope) -> MetricsView | APIError:
        """The view this request may read, or the 401 to answer."""
        if self.key_digest is None:
            return MetricsView.AGGREGATE if self.tenants_authenticated else MetricsView.FULL
        token = bearer_token(scope)
        if token is None:
            return APIError.unauthorized("/metrics needs the metrics key: send 'Authorization: Bearer <key>' "
                                         "with the token of the server's --metrics-key-file")
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        if not hmac.compare_digest(digest, self.key_digest):
            return APIError.unauthorized("incorrect metrics key (tenant API keys do not open /metrics)")
        return MetricsView.FULL
