"""The gateway policy: data classes, backends with their vendor facts, tenants, and gateway settings.

These are typed pydantic models; :mod:`kvfence.gateway.policy.loader` reads the YAML file, validates
it once at start-up and reports every problem with its line and field. Cross-references (a tenant's
class must exist, a class must be satisfiable by some backend ...) are checked there too.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator

from kvfence.scope import CacheScope

__all__ = [
    "Advisory",
    "ApiName",
    "BackendAuth",
    "BackendConfig",
    "CapacitySource",
    "ClassRequirements",
    "DataClassConfig",
    "GatewaySettings",
    "OverCapAction",
    "OverCapConfig",
    "Policy",
    "TenantConfig",
    "TenantLimits",
    "TrustTier",
    "UpstreamCacheScope",
    "VendorFacts",
    "scope_width",
]

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]*$")]


class _Strict(BaseModel):
    # A misspelt key is an error, not a silently ignored option.
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrustTier(enum.StrEnum):
    """Who else runs on the backend: everybody (shared), only us (dedicated), our own hardware."""

    SHARED = "shared"
    DEDICATED = "dedicated"
    ON_PREM = "on_prem"


class ApiName(enum.StrEnum):
    """An API family a backend speaks."""

    OPENAI = "openai"        # chat, completions, responses, embeddings
    ANTHROPIC = "anthropic"  # messages


class UpstreamCacheScope(enum.StrEnum):
    """How widely the backend itself shares its prompt cache among the callers it sees."""

    GLOBAL = "global"    # every caller of the backend shares
    ACCOUNT = "account"  # one cache per upstream credential (hosted APIs)
    NONE = "none"        # no cross-request prefix cache


_WIDTH = {
    CacheScope.GLOBAL: 4, CacheScope.ORG: 3, CacheScope.WORKSPACE: 2, CacheScope.KEY: 1, CacheScope.REQUEST: 0,
}


def scope_width(scope: CacheScope) -> int:
    """Order of cache scopes by how many callers share: global (widest) > org > workspace > key > request."""
    return _WIDTH[scope]


class CapacitySource(enum.StrEnum):
    """Where the gateway learns a backend's real KV capacity."""

    AUTO = "auto"        # try kvfence's capacity endpoint, vLLM's metrics, SGLang's server info, then the policy
    KVFENCE = "kvfence"
    VLLM = "vllm"
    SGLANG = "sglang"    # /get_server_info max_total_num_tokens
    POLICY = "policy"    # trust the vendor facts in this file only


class OverCapAction(enum.StrEnum):
    REJECT = "reject"
    TRIM = "trim"


class Advisory(_Strict):
    """A known isolation flaw of an engine below a version (e.g. vLLM < 0.9.0, CVE-2025-46570)."""

    engine: Name
    fixed_in: str = Field(description="first version without the flaw")
    id: str
    summary: str = ""


class VendorFacts(_Strict):
    """What the operator knows about a backend; capacity may also be discovered at start-up."""

    cache_scope: UpstreamCacheScope = UpstreamCacheScope.GLOBAL
    retention_days: int | None = Field(default=None, ge=0, description="prompt retention; null = unknown")
    engine: str | None = None
    engine_version: str | None = None
    advertised_context: int | None = Field(default=None, gt=0)
    kv_capacity_tokens: int | None = Field(default=None, gt=0)
    keeps_response_state: bool = Field(
        default=False, description="the backend stores Responses API state (previous_response_id, store: true): "
                                   "conversation text retained at the provider")


class BackendAuth(_Strict):
    """Upstream credentials, read from environment variables (never from the policy file itself).

    ``per_organization`` / ``per_tenant`` give each organisation / tenant key its own upstream account,
    which keeps the provider's per-account cache isolation intact.
    """

    header: str = "Authorization"
    scheme: str = "Bearer"
    api_key_env: str | None = None
    per_organization: dict[str, str] = Field(default_factory=dict)
    per_tenant: dict[str, str] = Field(default_factory=dict)


class BackendConfig(_Strict):
    """One OpenAI-compatible upstream: where it is, what it serves, and what we know about it."""

    name: Name
    url: HttpUrl = Field(description="base URL of the OpenAI API, e.g. http://127.0.0.1:8000/v1")
    models: list[str] = Field(default_factory=list, description="model names served; empty = any")
    model_map: dict[str, str] = Field(default_factory=dict, description="gateway model -> upstream model")
    tier: TrustTier
    facts: VendorFacts = Field(default_factory=VendorFacts)
    dedicated_to: list[str] = Field(
        default_factory=list,
        description='who may use it: "org" or "org/workspace"; empty = every tenant',
    )
    accepts_cache_salt: bool = False
    apis: list[ApiName] = Field(
        default_factory=lambda: [ApiName.OPENAI], min_length=1,
        description="the APIs the backend speaks: openai (chat, completions, responses, embeddings), anthropic "
                    "(messages); a Messages request to an openai-only backend is translated to chat")
    stream_usage: bool = Field(
        default=True,
        description="may the gateway add stream_options.include_usage to a streamed request (to count a "
                    "token-limited tenant's completion tokens); false for backends that reject the field")
    capacity: CapacitySource = CapacitySource.AUTO
    tokenizer: str | None = Field(default=None, description="local directory or tokenizer.json file")
    auth: BackendAuth = Field(default_factory=BackendAuth)
    priority: int = 100
    connect_timeout_s: float = Field(default=5.0, gt=0)
    read_timeout_s: float = Field(default=300.0, gt=0)
    max_connections: int = Field(default=1000, ge=1)
    http_client: Literal["auto", "httpx"] = Field(
        default="auto",
        description="auto: the gateway's lean HTTP/1.1 client for http:// URLs, httpx for https://; httpx: always httpx",
    )

    @property
    def base_url(self) -> str:
        return str(self.url).rstrip("/")

    def serves(self, model: str) -> bool:
        return not self.models or model in self.models or model in self.model_map

    def upstream_model(self, model: str) -> str:
        return self.model_map.get(model, model)


class OverCapConfig(_Strict):
    """What to do with a prompt over the cap: reject it, or trim retrieved context by BM25 relevance."""

    action: OverCapAction = OverCapAction.REJECT
    retrieved_roles: list[str] = Field(default_factory=lambda: ["tool"])
    retrieved_names: list[str] = Field(
        default_factory=list, description="glob patterns on a message's `name` that mark a document block"
    )


class ClassRequirements(_Strict):
    """Conditions on a backend's vendor facts for it to receive this class."""

    max_cache_scope: CacheScope | None = Field(
        default=None, description="widest prompt-cache sharing allowed, after the gateway's salt"
    )
    max_retention_days: int | None = Field(default=None, ge=0)
    no_advisory_engine: bool = False
    context_within_capacity: bool = False
    distinct_upstream_account: bool = False
    dedicated_per: Literal["organization", "workspace"] | None = None


class DataClassConfig(_Strict):
    """A sensitivity level; the list order in the policy is the order (first = least sensitive)."""

    name: Name
    description: str = ""
    allowed_tiers: list[TrustTier] = Field(min_length=1)
    requires: ClassRequirements = Field(default_factory=ClassRequirements)
    over_cap: OverCapConfig = Field(default_factory=OverCapConfig)
    max_prompt_tokens: int | None = Field(default=None, gt=0)
    allow_stored_responses: bool = Field(
        default=False, description="may a Responses request of this class use state kept at the backend "
                                   "(previous_response_id, store: true); only backends with keeps_response_state")
    protection: dict[str, Any] = Field(default_factory=dict, description="read by the protection hooks")


class TenantLimits(_Strict):
    """Per-tenant limits; the per-minute ones count over a sliding window (``gateway.limit_window_s``)."""

    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(
        default=None, gt=0, description="prompt tokens (counted at admission) + completion tokens (from usage)")
    max_concurrent: int | None = Field(default=None, gt=0)
    max_prompt_tokens: int | None = Field(default=None, gt=0)


class TenantConfig(_Strict):
    """A gateway API key (stored as its SHA-256) and who it belongs to."""

    name: Name
    key_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    organization: Name
    workspace: Name = "default"
    default_class: Name
    limits: TenantLimits = Field(default_factory=TenantLimits)
    canaries: list[str] = Field(default_factory=list)


class HttpSettings(_Strict):
    """Limits of every client connection to the gateway (its HTTP server, :mod:`kvfence.http`);
    ``gateway.max_body_bytes`` bounds the body."""

    idle_timeout_s: float = Field(default=15.0, gt=0, description="close a connection idle this long")
    head_timeout_s: float = Field(default=10.0, gt=0, description="a request head must be complete this long "
                                                                  "after its first byte (408)")
    body_timeout_s: float = Field(default=30.0, gt=0, description="a request body must be complete this long "
                                                                  "after its head (408)")
    max_head_bytes: int = Field(default=64 * 1024, ge=1024, description="request line and header fields (431)")
    max_headers: int = Field(default=100, ge=8, description="header fields per request (431)")


class GatewaySettings(_Strict):
    """Process-wide settings."""

    secret_env: str = Field(default="KVFENCE_GATEWAY_SECRET", description="env var holding the salt secret")
    audit_log: str = Field(default="sqlite:///kvfence-gateway-audit.db", description="sqlite:///PATH or postgresql://")
    cache_salt_scope: CacheScope = CacheScope.WORKSPACE
    capacity_refresh_s: float = Field(default=60.0, ge=0)
    backend_retry_after_s: float = Field(default=5.0, ge=0, description="how long a failed backend is skipped")
    hooks: list[str] = Field(default_factory=list, description="extra hooks as module:factory")
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024, description="larger requests get a 413")
    http: HttpSettings = Field(default_factory=HttpSettings)
    metrics_key_file: str | None = Field(
        default=None,
        description="file holding a bearer token (one word, >= 16 characters) for GET /metrics: with it, /metrics "
                    "answers 401 without that token and the per-tenant series with it; without it, every caller "
                    "gets the series summed over tenants (no tenant name)")
    redis_url: str | None = Field(default=None, description="share rate-limit state between replicas")
    workers: int = Field(default=1, ge=1, le=256,
                         description="gateway processes accepting on one port (kvfence gateway --workers)")
    worker_limits: Literal["shared", "split"] = Field(
        default="shared",
        description="with workers > 1: 'shared' needs redis_url so every worker counts against one limit; "
                    "'split' gives each worker limit // workers (at least 1) of each tenant's limits")
    limit_window_s: float = Field(
        default=60.0, gt=0, le=3600,
        description="sliding window of requests_per_minute / tokens_per_minute: 60 means per minute, as their "
                    "names say; shorter only for tests and demos")
    load_protection: bool = Field(default=True, description="build kvfence.gateway.protection hooks when installed")
    protection: dict[str, Any] = Field(default_factory=dict, description="read by the protection hooks")


class Policy(_Strict):
    """The whole policy file."""

    version: Literal[1] = 1
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    advisories: list[Advisory] = Field(default_factory=list)
    data_classes: list[DataClassConfig] = Field(min_length=1)
    backends: list[BackendConfig] = Field(min_length=1)
    tenants: list[TenantConfig] = Field(default_factory=list)
    tenants_file: str | None = Field(default=None, description="more tenants, in their own YAML file")

    @field_validator("backends")
    @classmethod
    def _http_only(cls, backends: list[BackendConfig]) -> list[BackendConfig]:
        for backend in backends:
            if backend.url.scheme not in ("http", "https"):
                raise ValueError(f"backend {backend.name!r}: url must be http:// or https://")
        return backends

    def class_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.data_classes)

    def data_class(self, name: str) -> DataClassConfig:
        for data_class in self.data_classes:
            if data_class.name == name:
                return data_class
        raise KeyError(name)

    def class_rank(self, name: str) -> int:
        return self.class_names().index(name)
