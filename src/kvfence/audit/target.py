"""The endpoint under audit and the tenants' keys, validated once at the command-line edge."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kvfence.errors import ConfigError

__all__ = ["Api", "AuditTarget", "Tenant", "normalise_endpoint"]


class Api(enum.StrEnum):
    """Which OpenAI-compatible API the audit speaks; ``auto`` probes chat first, then completions."""

    AUTO = "auto"
    CHAT = "chat"
    COMPLETIONS = "completions"


@dataclass(frozen=True, slots=True)
class Tenant:
    """One caller identity: a label for reports and the API key it authenticates with."""

    label: str
    key: str | None
    option: str = "--key"  # the command-line option that gave the key, for error messages

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def __repr__(self) -> str:  # never print a secret
        return f"Tenant({self.label!r})"


@dataclass(frozen=True, slots=True)
class AuditTarget:
    """Everything the checks need to know about the endpoint and who may call it.

    ``tenant_a`` is the victim (and the tenant whose canaries must never reach anyone else);
    ``same_org`` is another key of A's organisation; ``tenant_b`` is a key of another organisation.
    """

    base_url: str
    tenant_a: Tenant
    tenant_b: Tenant | None = None
    same_org: Tenant | None = None
    model: str | None = None
    api: Api = Api.AUTO
    timeout_s: float = 120.0
    extra_headers: dict[str, str] = field(default_factory=dict)
    max_context: int | None = None
    kv_capacity: int | None = None

    @classmethod
    def build(
        cls,
        *,
        endpoint: str,
        key: str | None,
        key_b: str | None = None,
        same_org_key: str | None = None,
        model: str | None = None,
        api: str = "auto",
        timeout_s: float = 120.0,
        headers: tuple[str, ...] = (),
        max_context: int | None = None,
        kv_capacity: int | None = None,
    ) -> AuditTarget:
        """Validate command-line values; every error names the option to change."""
        if timeout_s <= 0:
            raise ConfigError(f"--timeout must be positive, got {timeout_s}")
        for name, value in (("--max-context", max_context), ("--kv-capacity", kv_capacity)):
            if value is not None and value < 2:
                raise ConfigError(f"{name} must be at least 2 tokens, got {value}")
        keys = [k for k in (key, key_b, same_org_key) if k]
        if len(keys) != len(set(keys)):
            raise ConfigError("--key, --key-b and --same-org-key must be different keys")
        try:
            api_choice = Api(api)
        except ValueError as exc:
            raise ConfigError(f"--api must be one of {[a.value for a in Api]}, got {api!r}") from exc
        return cls(
            base_url=normalise_endpoint(endpoint),
            tenant_a=Tenant("tenant A", key or None),
            tenant_b=Tenant("tenant B (other organisation)", key_b, "--key-b") if key_b else None,
            same_org=Tenant("tenant A2 (same organisation)", same_org_key, "--same-org-key") if same_org_key else None,
            model=model or None,
            api=api_choice,
            timeout_s=timeout_s,
            extra_headers=_parse_headers(headers),
            max_context=max_context,
            kv_capacity=kv_capacity,
        )


def normalise_endpoint(endpoint: str) -> str:
    """``http://host:8000/v1/`` -> ``http://host:8000``; the checks add ``/v1/...`` themselves.

    A path before ``/v1`` (a gateway's ``/api/openai/v1``) is kept; a route after it
    (``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``) is dropped.
    """
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--endpoint must be an http(s) URL such as http://127.0.0.1:8000, got {endpoint!r}")
    path = parts.path.rstrip("/")
    # A URL pasted whole from an example (".../v1/chat/completions") names the same endpoint.
    for route in _ROUTES:
        if path.endswith(route):
            path = path[: -len(route)]
            break
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme}://{parts.netloc}{path}"


_ROUTES = ("/chat/completions", "/completions", "/models")


def _parse_headers(headers: tuple[str, ...]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for raw in headers:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header must look like 'Name: value', got {raw!r}")
        if name.strip().lower() == "authorization":
            raise ConfigError("--header cannot set Authorization; use --key / --key-b / --same-org-key")
        parsed[name.strip()] = value.strip()
    return parsed
