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

Rotation needs no restart: on each locked request the file's identity (inode, size, mtime) is
compared with the one last read, and a changed file is read again, so the old key is refused from
the first request after the new file is in place (an atomic ``mv`` or an in-place rewrite; one
that keeps size and mtime, within one clock tick, is caught by a re-read at most 1 s later). A
changed file that cannot be read or holds no valid key locks ``/metrics`` (every caller refused,
logged) until it is fixed: an operator who rotated meant the old key to stop working.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging

from starlette.types import Scope

from kvfence.metrics_key import MIN_METRICS_KEY_CHARS, MetricsKeyFile, read_metrics_key
from kvfence.server.api_errors import APIError
from kvfence.server.auth.middleware import bearer_token

__all__ = ["MIN_METRICS_KEY_CHARS", "MetricsAccess", "MetricsKeyFile", "MetricsView", "read_metrics_key"]

log = logging.getLogger(__name__)


class MetricsView(enum.Enum):
    """What one ``/metrics`` caller may see."""

    FULL = "full"  # per-organisation labels
    AGGREGATE = "aggregate"  # summed over organisations and scopes


class MetricsAccess:
    """Decides the view of each ``/metrics`` request (see the module docstring)."""

    def __init__(self, *, key_digest: bytes | None = None, tenants_authenticated: bool,
                 key_file: MetricsKeyFile | None = None) -> None:
        self.key_digest = key_digest
        self.key_file = key_file
        self.tenants_authenticated = tenants_authenticated

    @property
    def is_locked(self) -> bool:
        return self.key_digest is not None or self.key_file is not None

    def view(self, scope: Scope) -> MetricsView | APIError:
        """The view this request may read, or the 401 to answer."""
        if not self.is_locked:
            return MetricsView.AGGREGATE if self.tenants_authenticated else MetricsView.FULL
        token = bearer_token(scope)
        if token is None:
            return APIError.unauthorized("/metrics needs the metrics key: send 'Authorization: Bearer <key>' "
                                         "with the token of the server's --metrics-key-file")
        expected = self.key_file.digest() if self.key_file is not None else self.key_digest
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        if expected is None or not hmac.compare_digest(digest, expected):
            return APIError.unauthorized("incorrect metrics key (tenant API keys do not open /metrics)")
        return MetricsView.FULL
