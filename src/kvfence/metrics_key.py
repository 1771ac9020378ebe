"""The bearer token that opens ``/metrics`` on ``kvfence serve`` (``--metrics-key-file``) and
``kvfence gateway`` (``gateway.metrics_key_file``): read from a file, kept as its SHA-256, re-read
when the file changes (see :mod:`kvfence.server.auth.metrics_access` for the rotation rules).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from pathlib import Path

from prometheus_client.metrics_core import Metric

from kvfence.errors import ConfigError

__all__ = ["MIN_METRICS_KEY_CHARS", "MetricsKeyFile", "matches", "read_metrics_key", "summed_away"]

log = logging.getLogger("kvfence.server.auth.metrics_access")

_REREAD_S = 1.0

MIN_METRICS_KEY_CHARS = 16


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


def matches(key_file: MetricsKeyFile, token: str | None) -> bool:
    """Whether ``token`` is the key now in ``key_file`` (constant-time; False while the file is unusable)."""
    expected = key_file.digest()
    if token is None or expected is None:
        return False
    return hmac.compare_digest(hashlib.sha256(token.encode("utf-8")).digest(), expected)


def summed_away(family: Metric, labels: frozenset[str], over: str) -> Metric:
    """``family`` as seen without the metrics key: the ``labels`` that name tenants summed away (a
    ``_created`` sample keeps the earliest, it is not a count); a family without them is returned as is."""
    if not any(labels & sample.labels.keys() for sample in family.samples):
        return family
    out = Metric(family.name, f"{family.documentation} (summed over {over})", family.type, family.unit)
    totals: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in family.samples:
        kept = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in labels))
        key = (sample.name, kept)
        if sample.name.endswith("_created"):
            totals[key] = min(totals.get(key, sample.value), sample.value)
        else:
            totals[key] = totals.get(key, 0.0) + sample.value
    for (name, kept), value in totals.items():
        out.add_sample(name, dict(kept), value)
    return out
