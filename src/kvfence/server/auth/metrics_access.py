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
import os
import threading
import time
from pathlib import Path

from starlette.types import Scope

from kvfence.errors import ConfigError
from kvfence.server.api_errors import APIError
from kvfence.server.auth.middleware import bearer_token

__all__ = ["MIN_METRICS_KEY_CHARS", "MetricsAccess", "MetricsKeyFile", "MetricsView", "read_metrics_key"]

log = logging.getLogger(__name__)

_REREAD_S = 1.0

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


def _file_identity(path: Path) -> tuple[int, int, int, int] | None:
    """What changes when the file is replaced or rewritten: device, inode, size, mtime (ns)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class MetricsKeyFile:
    """The metrics key of ``--metrics-key-file``, read again whenever the file changes (rotation).

    The first read happens at construction and raises :class:`ConfigError` (the server refuses to
    start); later failed reads lock the endpoint instead of keeping the old key alive.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._identity = _file_identity(path)
        self._digest: bytes | None = read_metrics_key(path)
        self._read_at = time.monotonic()
        self.num_reloads = 0

    def digest(self) -> bytes | None:
        """The current key's SHA-256, or None while the file is missing or invalid (nobody gets in)."""
        identity = _file_identity(self.path)
        now = time.monotonic()
        with self._lock:
            # A same-size rewrite within one mtime tick keeps the identity: re-read at least once a
            # second anyway, which bounds how long an old key can outlive such a rotation.
            if identity == self._identity and identity is not None and now - self._read_at < _REREAD_S:
                return self._digest
            self._identity, self._read_at = identity, now
            previous = self._digest
            try:
                self._digest = read_metrics_key(self.path)
            except ConfigError as exc:
                self._digest = None
                if previous is not None:
                    log.error("the metrics key file changed and is unusable; /metrics refuses every key until "
                              "it is fixed: %s", exc)
                return None
            if self._digest != previous:
                self.num_reloads += 1
                log.warning("metrics key file %s changed: the new key is in force, the old one is refused",
                            self.path)
            return self._digest


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
