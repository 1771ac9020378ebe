"""Typed server configuration, validated once when the server starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kvfence.engine.sampling.generation_defaults import check_generation_config
from kvfence.errors import ConfigError
from kvfence.http.server import HttpConfig
from kvfence.scope import CacheScope

__all__ = ["ServerConfig"]


@dataclass(frozen=True)
class ServerConfig:
    """Everything about the HTTP side; the engine has its own ``EngineConfig``.

    ``keys_path=None`` means ``--no-auth``: every caller is one local tenant. ``metrics_key_path``
    locks ``/metrics`` behind its own bearer token (see :mod:`kvfence.server.auth.metrics_access`).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    keys_path: Path | None = None
    cache_scope: CacheScope = CacheScope.ORG
    secret_path: Path | None = None
    served_model_names: tuple[str, ...] = ()
    max_queue_len: int = 256
    max_body_bytes: int = 16 * 1024 * 1024
    generation_config: str = "auto"  # as vLLM's flag: the model's sampling defaults, none, or a directory's
    metrics_key_path: Path | None = None  # /metrics per-organisation view behind this bearer token
    max_org_share: float = 0.5  # of max_num_seqs + max_queue_len, per organisation (1.0: no share)
    # the HTTP server's connection limits; its max_body_bytes is replaced by the one above
    http: HttpConfig = field(default_factory=lambda: HttpConfig(idle_timeout_s=15.0, graceful_timeout_s=5.0))

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be in 0..65535, got {self.port}")
        if self.max_queue_len < 0:
            raise ConfigError(f"--max-queue-len must be >= 0, got {self.max_queue_len}")
        if not 0.0 < self.max_org_share <= 1.0:
            raise ConfigError(f"--max-org-share must be in (0, 1], got {self.max_org_share}")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"--max-body-bytes must be at least 1024, got {self.max_body_bytes}")
        check_generation_config(self.generation_config, name="--generation-config")
        if any(not name.strip() for name in self.served_model_names):
            raise ConfigError("--served-model-name must not be empty")

    @property
    def auth_enabled(self) -> bool:
        return self.keys_path is not None
