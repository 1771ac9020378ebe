"""Tenant API keys: a TOML file that maps SHA-256 hashes of secrets to identities.

The file never holds a secret, only its hash, so a leaked keys file does not let anyone call the
server. Each entry names the organisation and workspace that the cache scope (I5) is derived
from, a random ``id`` that stands for the key itself in ``--cache-scope key``, a display name, and
may carry per-key limits::

    [[keys]]
    organization = "acme"
    workspace = "research"
    name = "alice-laptop"
    id = "k-4f1c9a0b2d7e6f35a1c2"
    sha256 = "9f86d0..."
    max_concurrent_requests = 4   # optional
    max_prompt_tokens = 4096      # optional

The key scope derives from ``id``, never from ``name``: names are reused (revoke "ci", add a new
"ci"), and a new key must not inherit the prefix cache of the key it replaces. An entry without an
``id`` (files written before ids existed) gets one derived from its hash, which no other key
shares either; the next ``kvfence keys add`` or ``revoke`` writes it into the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvfence.errors import ConfigError
from kvfence.scope import TenantIdentity

__all__ = [
    "ApiKey", "KeyRing", "add_key", "derived_key_id", "generate_secret", "hash_secret", "load_keys", "new_key_id",
    "write_keys",
]

SECRET_PREFIX = "kvf-"
log = logging.getLogger(__name__)

_ID_FIELDS = ("organization", "workspace", "name")
_LIMIT_FIELDS = ("max_concurrent_requests", "max_prompt_tokens")
_ALLOWED_FIELDS = {*_ID_FIELDS, "id", "sha256", *_LIMIT_FIELDS}
_KEY_ID_PREFIX = "k-"
# Spellings other tools use for the same fields; read, never written.
_ALIASES = {"org": "organization", "key_name": "name", "hash": "sha256", "key_sha256": "sha256",
            "sha256_hash": "sha256"}


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One entry of the keys file: who the key belongs to and its optional limits."""

    organization: str
    workspace: str
    name: str
    sha256: str
    max_concurrent_requests: int | None = None
    max_prompt_tokens: int | None = None
    key_id: str = ""  # empty: derived from the hash (see :attr:`scope_id`)

    @property
    def identity(self) -> TenantIdentity:
        """Who the key belongs to, with the key's display name (for messages and limits)."""
        return TenantIdentity(self.organization, self.workspace, self.name)

    @property
    def scope_id(self) -> str:
        """The key's own identity for the key cache scope: its ``id``, or one derived from its hash.

        Never the name: a new key that reuses a revoked key's name must not share its cache (I5).
        """
        return self.key_id or derived_key_id(self.sha256)

    @property
    def scope_identity(self) -> TenantIdentity:
        """The identity cache scopes are computed from (I5): the ``key_name`` field holds :attr:`scope_id`."""
        return TenantIdentity(self.organization, self.workspace, "id:" + self.scope_id)


def new_key_id() -> str:
    """A fresh random key id (80 bits: ids are not secrets, they only must never repeat)."""
    return _KEY_ID_PREFIX + secrets.token_hex(10)


def derived_key_id(sha256: str) -> str:
    """The id of a key filed without one: a function of its hash, so it is stable across reloads and
    restarts and no other key (another secret, another hash) has it."""
    return "h-" + hashlib.sha256(b"kvfence-key-id:" + sha256.encode()).hexdigest()[:20]


def generate_secret() -> str:
    """A new API key secret: a recognisable prefix and 256 random bits."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    """Hex SHA-256 of a secret; the only form in which keys are stored."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _check_label(value: Any, field: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {field!r} must be a non-empty string")
    if len(value) > 128 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ConfigError(f"{where}: {field!r} must be at most 128 printable characters, got {value!r}")
    return value


def _check_limit(value: Any, field: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {field!r} must be a positive integer, got {value!r}")
    return value


def _parse_entry(raw: Any, where: str, default_name: str | None = None) -> ApiKey:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: each [[keys]] entry must be a table")
    raw = dict(raw)
    for alias, field in _ALIASES.items():
        if alias in raw:
            if field in raw:
                raise ConfigError(f"{where}: give {field!r} or {alias!r}, not both")
            raw[field] = raw.pop(alias)
    if default_name is not None:
        raw.setdefault("name", default_name)
    unknown = set(raw) - _ALLOWED_FIELDS
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_ALLOWED_FIELDS)}")
    digest = raw.get("sha256")
    if isinstance(digest, str):
        digest = digest.strip().lower().removeprefix("sha256:")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ConfigError(f"{where}: 'sha256' must be 64 lower-case hex digits (the hash, never the key)")
    key_id = raw.get("id")
    if key_id is None:
        key_id = derived_key_id(digest)  # migration: a file written before key ids
    elif not isinstance(key_id, str) or not 1 <= len(key_id) <= 64 or not all(c.isalnum() or c in "-_" for c in key_id):
        raise ConfigError(f"{where}: 'id' must be 1-64 letters, digits, '-' or '_', got {key_id!r}")
    return ApiKey(
        organization=_check_label(raw.get("organization"), "organization", where),
        workspace=_check_label(raw.get("workspace", "default"), "workspace", where),
        name=_check_label(raw.get("name"), "name", where),
        sha256=digest,
        max_concurrent_requests=_check_limit(raw.get("max_concurrent_requests"), "max_concurrent_requests", where),
        max_prompt_tokens=_check_limit(raw.get("max_prompt_tokens"), "max_prompt_tokens", where),
        key_id=key_id,
    )


def load_keys(path: str | Path) -> list[ApiKey]:
    """Read and validate a keys file; a missing file is an empty key list."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"keys file {path} is not valid TOML: {exc}") from exc
    unknown = set(data) - {"keys"}
    if unknown:
        raise ConfigError(f"keys file {path}: unknown top-level entries {sorted(unknown)}; expected [[keys]]")
    entries = data.get("keys", [])
    if isinstance(entries, dict):  # [keys.<name>] tables: the table name is the key name
        keys = [_parse_entry(raw, f"keys file {path}, [keys.{name}]", name) for name, raw in entries.items()]
    elif isinstance(entries, list):
        keys = [_parse_entry(raw, f"keys file {path}, entry {i + 1}") for i, raw in enumerate(entries)]
    else:
        raise ConfigError(f"keys file {path}: 'keys' must be an array of tables ([[keys]])")
    seen_hashes: set[str] = set()
    seen_names: set[tuple[str, str, str]] = set()
    seen_ids: set[str] = set()
    for key in keys:
        ident = (key.organization, key.workspace, key.name)
        if key.sha256 in seen_hashes:
            raise ConfigError(f"keys file {path}: the same key hash appears twice ({key.name!r})")
        if key.scope_id in seen_ids:
            # Two keys with one id would share a key-scoped prefix cache.
            raise ConfigError(f"keys file {path}: the key id {key.scope_id!r} appears twice ({key.name!r})")
        seen_ids.add(key.scope_id)
        if ident in seen_names:
            raise ConfigError(f"keys file {path}: duplicate key name {'/'.join(ident)!r}")
        seen_hashes.add(key.sha256)
        seen_names.add(ident)
    return keys


def _toml_string(value: str) -> str:
    # JSON string escapes are a subset of TOML basic-string escapes once non-ASCII is kept raw.
    return json.dumps(value, ensure_ascii=False)


def write_keys(path: str | Path, keys: list[ApiKey]) -> None:
    """Write the keys file atomically with owner-only permissions."""
    path = Path(path)
    lines = ["# kvfence API keys. Only SHA-256 hashes of the secrets are stored here.", ""]
    for key in keys:
        lines.append("[[keys]]")
        for field in _ID_FIELDS:
            lines.append(f"{field} = {_toml_string(getattr(key, field))}")
        lines.append(f"id = {_toml_string(key.scope_id)}")  # written out: migrates an id-less entry
        lines.append(f"sha256 = {_toml_string(key.sha256)}")
        for field in _LIMIT_FIELDS:
            value = getattr(key, field)
            if value is not None:
                lines.append(f"{field} = {value}")
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".keys-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_key(
    path: str | Path,
    *,
    organization: str,
    workspace: str = "default",
    name: str,
    max_concurrent_requests: int | None = None,
    max_prompt_tokens: int | None = None,
) -> str:
    """Add a new key to the file (created if absent) and return its secret, which is stored nowhere."""
    where = "new key"
    keys = load_keys(path)
    secret = generate_secret()
    entry = ApiKey(
        organization=_check_label(organization, "organization", where),
        workspace=_check_label(workspace, "workspace", where),
        name=_check_label(name, "name", where),
        sha256=hash_secret(secret),
        max_concurrent_requests=_check_limit(max_concurrent_requests, "max_concurrent_requests", where),
        max_prompt_tokens=_check_limit(max_prompt_tokens, "max_prompt_tokens", where),
        key_id=new_key_id(),
    )
    if any((k.organization, k.workspace, k.name) == (organization, workspace, name) for k in keys):
        raise ConfigError(f"a key named {name!r} already exists in {organization}/{workspace}; pick another name")
    write_keys(path, [*keys, entry])
    return secret


class KeyRing:
    """Looks up API keys by secret; re-reads the file when it changes, so added keys work at once."""

    def __init__(self, path: str | Path, *, reload_interval: float = 1.0) -> None:
        self.path = Path(path)
        self._reload_interval = reload_interval
        self._lock = threading.Lock()
        self._by_hash: dict[str, ApiKey] = {}
        self._num_organizations = 0
        self._mtime: int | None = None
        self._checked_at = 0.0
        self._load()

    def _load(self) -> None:
        try:
            mtime: int | None = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = None
        keys = load_keys(self.path)
        self._by_hash = {k.sha256: k for k in keys}
        self._num_organizations = len({k.organization for k in keys})
        self._mtime = mtime

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < self._reload_interval:
            return
        self._checked_at = now
        try:
            mtime: int | None = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = None
        if mtime == self._mtime:
            return
        try:
            self._load()
        except ConfigError as exc:
            log.error("keys file changed but is invalid, keeping the previous keys: %s", exc)
            # A half-edited or broken file must not lock everybody out: keep serving the last
            # good key set until the file is fixed.
            self._mtime = mtime

    def __len__(self) -> int:
        return len(self._by_hash)

    @property
    def num_organizations(self) -> int:
        """Organisations with at least one key (as of the last reload)."""
        return self._num_organizations

    def lookup(self, secret: str) -> ApiKey | None:
        """The key whose hash matches ``secret``, or None."""
        with self._lock:
            self._maybe_reload()
            by_hash = self._by_hash
        # Lookup by digest: an attacker learns nothing useful from timing, the digest is preimage-safe.
        return by_hash.get(hash_secret(secret))
