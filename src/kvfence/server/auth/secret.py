"""The server secret that keys cache scopes (invariant I5).

Scope keys are HMACs of the authenticated identity under this secret, so nobody outside the server
can compute or guess another tenant's scope. The secret comes from an environment variable or a
file; a missing file is generated on first start with owner-only permissions.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from kvfence.errors import ConfigError

__all__ = ["SECRET_ENV_VAR", "default_secret_path", "load_server_secret"]

SECRET_ENV_VAR = "KVFENCE_SERVER_SECRET"
MIN_SECRET_BYTES = 16

log = logging.getLogger(__name__)


def default_secret_path() -> Path:
    """``$KVFENCE_HOME/server-secret``, else ``~/.config/kvfence/server-secret`` (not a cache dir:
    losing the secret would silently re-key every scope)."""
    home = os.environ.get("KVFENCE_HOME")
    if home:
        return Path(home) / "server-secret"
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "kvfence" / "server-secret"


def _decode(text: str, source: str) -> bytes:
    text = text.strip()
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = text.encode("utf-8")
    if len(raw) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"the server secret from {source} is too short ({len(raw)} bytes); "
            f"use at least {MIN_SECRET_BYTES} random bytes, e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`"
        )
    return raw


def _create(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    raw = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Another process created it between our check and now: use theirs.
        return _read(path)
    with os.fdopen(fd, "w") as fh:
        fh.write(raw.hex() + "\n")
    log.info("generated a new server secret in %s (mode 0600)", path)
    return raw


def _read(path: Path) -> bytes:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"server secret file {path} is readable by other users (mode {mode:04o}); run `chmod 600 {path}`"
        )
    return _decode(path.read_text(encoding="utf-8"), str(path))


def load_server_secret(path: str | Path | None = None) -> bytes:
    """Return the secret: ``$KVFENCE_SERVER_SECRET`` if set, else the file (generated when absent)."""
    env = os.environ.get(SECRET_ENV_VAR)
    if env:
        return _decode(env, f"${SECRET_ENV_VAR}")
    file = Path(path) if path is not None else default_secret_path()
    if file.exists():
        return _read(file)
    return _create(file)
