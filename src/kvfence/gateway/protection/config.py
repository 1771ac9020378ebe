"""Typed configuration of data protection and leak detection, validated once at start-up.

Two places of the gateway policy feed it: ``gateway.protection`` (process-wide: detectors, leak
index) and each data class's ``protection`` (what to do with each kind of finding in that class)::

    gateway:
      protection:
        detector_timeout_s: 2.0
        ner_model: /models/en_core_web_sm      # optional spaCy pipeline on disk, for PERSON
        raise_class: {US_SSN: restricted}      # entity -> class a finding raises the request to
        leak: {ngram: 4, min_run: 4, window_s: 900, index: redis, redis_url: redis://127.0.0.1:6379/0}
    data_classes:
      - name: internal
        protection: {pii: pseudonymise, secrets: pseudonymise, entities: {CREDIT_CARD: block},
                     embeddings: block}          # /v1/embeddings: block, pass or pseudonymise
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvfence.errors import ConfigError
from kvfence.gateway.protection.detect.findings import Category

__all__ = ["Action", "ClassProtection", "LeakConfig", "ProtectionConfig", "parse_class_protection",
           "parse_protection_config"]


class Action(enum.StrEnum):
    """What happens to a finding before the request leaves the gateway."""

    PASS = "pass"                  # forwarded as is
    PSEUDONYMISE = "pseudonymise"  # replaced by a stable placeholder; personal data restored in the answer
    BLOCK = "block"                # the whole request is refused (400 request_blocked)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


NonTextKind = Literal["image", "audio", "video", "file"]
NON_TEXT_KINDS: tuple[NonTextKind, ...] = ("image", "audio", "video", "file")


class ClassProtection(_Strict):
    """Actions of one data class: per category, overridden per entity type; and per kind of non-text
    content part (bytes no detector reads: ``pass`` or ``block``; unset, a class named ``public``
    passes them and every other class blocks them)."""

    pii: Action = Action.PSEUDONYMISE
    secrets: Action = Action.PSEUDONYMISE
    entities: dict[str, Action] = Field(default_factory=dict)
    # /v1/embeddings: one action for every finding of an embedding input (nothing comes back to
    # restore: a pseudonymised input is embedded with its placeholders, see docs/apis.md); None: the
    # actions above apply.
    embeddings: Action | None = None

    def for_embeddings(self) -> ClassProtection:
        """The actions that apply to an embeddings request of this class."""
        if self.embeddings is None:
            return self
        return ClassProtection(pii=self.embeddings, secrets=self.embeddings, non_text=self.non_text)
    non_text: dict[NonTextKind, Literal["pass", "block"]] = Field(default_factory=dict)

    def non_text_passes(self, kind: str, class_name: str) -> bool:
        action = self.non_text.get(kind)  # type: ignore[call-overload]
        return class_name == "public" if action is None else action == "pass"

    def action_for(self, entity: str, category: Category) -> Action:
        if entity in self.entities:
            return self.entities[entity]
        return self.secrets if category is Category.SECRET else self.pii


class LeakConfig(_Strict):
    """Cross-tenant leak detection over keyed n-gram fingerprints of recent prompts."""

    enabled: bool = True
    ngram: int = Field(default=4, ge=3, le=16, description="words per fingerprint")
    min_run: int = Field(default=4, ge=1, le=64,
                         description="consecutive foreign n-grams that make a suspicion (4+4-1 = 7 words)")
    window_s: float = Field(default=900.0, gt=0, description="how long a prompt's fingerprints are kept")
    max_owners: int = Field(default=1, ge=1,
                            description="an n-gram in more tenants' prompts than this is common: no evidence")
    common_orgs: int = Field(default=3, ge=2,
                             description="an n-gram that this many organizations besides the asker sent or were "
                                         "answered with is common language: no evidence (leak/scan.py)")
    withheld_orgs: int = Field(
        default=3, ge=0, description="N >= 2 (default 3): an n-gram made only of ordinary dictionary words (no name, "
                                     "number, code or identifier; leak/ordinary.py) that was caught in answers withheld "
                                     "from N organizations in the window is common language, so a phrase one tenant "
                                     "planted stops being withheld; a span holding any distinctive word is withheld "
                                     "every time. 0: a withheld answer never makes an n-gram common")
    tenant_unit: Literal["organization", "workspace", "key"] = "organization"
    index: Literal["memory", "redis"] = "memory"
    redis_url: str | None = None
    redis_prefix: str = "kvfence:fp:"
    canaries: bool = False
    max_index_entries: int = Field(default=2_000_000, ge=1000,
                                   description="in-memory index bound (~200 bytes each); oldest go first")

    @model_validator(mode="after")
    def _withheld_orgs_is_off_or_several(self) -> LeakConfig:
        if self.withheld_orgs == 1:
            raise ValueError("leak.withheld_orgs is 1: one withheld answer is no evidence of common language; "
                             "use 0 (off) or 2 or more")
        return self

    @model_validator(mode="after")
    def _redis_needs_url(self) -> LeakConfig:
        if self.index == "redis" and not self.redis_url:
            raise ValueError("leak.index is 'redis' but leak.redis_url is not set")
        return self


class ProtectionConfig(_Strict):
    """Process-wide protection settings (``gateway.protection`` in the policy)."""

    enabled: bool = True
    detector_timeout_s: float = Field(default=2.0, gt=0)
    ner_model: Path | None = None
    spacy_cache_dir: Path | None = None
    disabled_rules: list[str] = Field(default_factory=list)
    private_ips: bool = Field(
        default=False, description="count private, loopback, link-local and documentation IP addresses as personal "
                                   "data (default: only globally routable addresses are)")
    score_threshold: float = Field(default=0.5, ge=0, le=1)
    raise_class: dict[str, str] | None = Field(
        default=None, description="entity -> data class; default: national IDs to the most sensitive class")
    raise_on_topics: dict[str, str] | None = Field(
        default=None, description="topic (health, hr) -> data class; default: health to the most sensitive class")
    leak: LeakConfig = Field(default_factory=LeakConfig)

    @model_validator(mode="after")
    def _ner_exists(self) -> ProtectionConfig:
        if self.ner_model is not None and not self.ner_model.exists():
            raise ValueError(f"ner_model {str(self.ner_model)!r} does not exist")
        return self


def _format(exc: ValidationError, where: str) -> str:
    problems = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error["loc"])
        problems.append(f"{where}.{location}: {error['msg']}" if location else f"{where}: {error['msg']}")
    return "; ".join(problems)


def parse_protection_config(raw: Mapping[str, Any] | None) -> ProtectionConfig:
    """Validate ``gateway.protection``; raises :class:`ConfigError` naming each bad field."""
    try:
        return ProtectionConfig.model_validate(dict(raw or {}))
    except ValidationError as exc:
        raise ConfigError(_format(exc, "gateway.protection")) from None


def parse_class_protection(class_name: str, raw: Mapping[str, Any] | None) -> ClassProtection:
    """Validate a data class's ``protection`` block."""
    try:
        return ClassProtection.model_validate(dict(raw or {}))
    except ValidationError as exc:
        raise ConfigError(_format(exc, f"data_classes[{class_name}].protection")) from None
