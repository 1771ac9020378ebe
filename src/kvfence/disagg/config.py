"""Typed configuration of disaggregated serving, validated once."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kvfence.disagg.protocol import MAX_KEY_SIZE
from kvfence.engine.config import EngineConfig
from kvfence.errors import ConfigError

__all__ = ["KEY_ENV", "DisaggConfig", "read_handoff_key"]

KEY_ENV = "KVFENCE_HANDOFF_KEY"  # hex; an environment variable, so the key is not in `ps` output


def read_handoff_key(key_file: Path | None) -> bytes:
    """The shared handoff key: hex from ``key_file``, else from ``$KVFENCE_HANDOFF_KEY``, else b"" (unkeyed)."""
    try:
        text = key_file.read_text(encoding="utf-8").strip() if key_file is not None else os.environ.get(KEY_ENV, "")
    except OSError as exc:
        raise ConfigError(f"cannot read the handoff key file {key_file}: {exc}") from exc
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ConfigError("the handoff key must be hex (e.g. from `openssl rand -hex 32`)") from None
    if len(key) > MAX_KEY_SIZE:
        raise ConfigError(f"the handoff key is {len(key)} bytes; at most {MAX_KEY_SIZE}")
    return key


@dataclass
class DisaggConfig:
    """A decode worker (this process) and the prefill worker it gets its KV from.

    ``engine`` configures the decode side. ``prefill`` configures the prefill worker this engine
    spawns (default: the same as ``engine``); with ``prefill_address`` set, the engine connects to a
    running ``kvfence disagg prefill-worker`` instead (``tcp://127.0.0.1:PORT`` or ``ipc://PATH``).
    ``handoff_key`` keys the page checksums and manifest MAC; a spawned worker gets a fresh random
    key when none is given. ``handoff_timeout_s`` bounds the time from submission to a verified
    handoff: timeout means abort (I4).
    """

    engine: EngineConfig
    prefill: EngineConfig | None = None
    prefill_address: str | None = None
    handoff_key: bytes | None = None
    handoff_timeout_s: float = 60.0
    connect_timeout_s: float = 180.0

    @property
    def max_num_seqs(self) -> int:
        """The decode side's batch limit (the server sizes its queue from it)."""
        return self.engine.max_num_seqs

    def __post_init__(self) -> None:
        if self.prefill is not None and self.prefill_address is not None:
            raise ConfigError("give either a prefill config (spawn a worker) or prefill_address (connect), not both")
        if self.prefill_address is not None and not self.prefill_address.startswith(("tcp://", "ipc://")):
            raise ConfigError(f"prefill_address must be tcp://HOST:PORT or ipc://PATH, got {self.prefill_address!r}")
        if self.handoff_key is not None and len(self.handoff_key) > MAX_KEY_SIZE:
            raise ConfigError(f"handoff_key is {len(self.handoff_key)} bytes; at most {MAX_KEY_SIZE}")
        for name in ("handoff_timeout_s", "connect_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        prefill = self.prefill or self.engine
        if (prefill.page_size, prefill.dtype, prefill.resolved_kv_cache_dtype) != (
                self.engine.page_size, self.engine.dtype, self.engine.resolved_kv_cache_dtype):
            raise ConfigError("the prefill and decode workers need the same page_size, dtype and kv_cache_dtype")
        if prefill.model != self.engine.model:
            raise ConfigError("the prefill and decode workers must run the same model")
