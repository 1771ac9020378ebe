"""Cross-reference checks of a policy's protection settings, shared by `gateway check` and start-up.

The schema (:mod:`.config`) says whether each field has the right type; these say whether the names
in them mean something: an entity type or rule that exists, a data class the policy defines, a
canary that can only belong to one tenant. A typo here would otherwise do nothing silently (a
misspelt ``CREDITCARD: block`` lets every card through), so each one is an error naming its field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvfence.gateway.protection.config import ClassProtection, ProtectionConfig
from kvfence.gateway.protection.detect.recognizers.pii import PII_ENTITIES, PII_RULES
from kvfence.gateway.protection.detect.recognizers.secrets import SECRET_ENTITIES, SECRET_RULES
from kvfence.gateway.protection.detect.topics import TOPICS
from kvfence.gateway.protection.leak.fingerprint import leak_fold
from kvfence.gateway.protection.leak.scan import compact

if TYPE_CHECKING:
    from kvfence.gateway.policy.schema import Policy

__all__ = ["KNOWN_ENTITIES", "KNOWN_RULES", "MIN_CANARY_CHARS", "protection_policy_problems"]

Loc = tuple[str | int, ...]

KNOWN_ENTITIES: frozenset[str] = PII_ENTITIES | SECRET_ENTITIES | {"PERSON"}
KNOWN_RULES: frozenset[str] = frozenset(rule.name for rule in (*PII_RULES, *SECRET_RULES))
# A canary is looked for in every answer to every other tenant: a short or common one ("a", "the")
# would withhold ordinary answers as leaks.
MIN_CANARY_CHARS = 8


def protection_policy_problems(policy: Policy) -> list[tuple[Loc, str]]:
    """Every name in the protection settings that refers to nothing, as (field path, message).

    Runs only on blocks that passed their schema; a block that did not is reported by it.
    """
    out: list[tuple[Loc, str]] = []
    classes = [c.name for c in policy.data_classes]
    known_entities = ", ".join(sorted(KNOWN_ENTITIES))
    try:
        config = ProtectionConfig.model_validate(policy.gateway.protection or {})
    except ValueError:
        config = None
    if config is not None:
        where: Loc = ("gateway", "protection")
        for entity, target in (config.raise_class or {}).items():
            if entity not in KNOWN_ENTITIES:
                out.append(((*where, "raise_class", entity), f"unknown entity type {entity!r}; known: {known_entities}"))
            if target not in classes:
                out.append(((*where, "raise_class", entity),
                            f"unknown data class {target!r}; defined: {', '.join(classes)}"))
        for topic, target in (config.raise_on_topics or {}).items():
            if topic not in TOPICS:
                out.append(((*where, "raise_on_topics", topic),
                            f"unknown topic {topic!r}; known: {', '.join(sorted(TOPICS))}"))
            if target not in classes:
                out.append(((*where, "raise_on_topics", topic),
                            f"unknown data class {target!r}; defined: {', '.join(classes)}"))
        for i, name in enumerate(config.disabled_rules):
            if name not in KNOWN_RULES and name not in KNOWN_ENTITIES:
                out.append(((*where, "disabled_rules", i),
                            f"{name!r} is neither a rule nor an entity type; rules: "
                            f"{', '.join(sorted(KNOWN_RULES))}; entity types: {known_entities}"))
    for i, data_class in enumerate(policy.data_classes):
        try:
            actions = ClassProtection.model_validate(data_class.protection or {})
        except ValueError:
            continue
        for entity in actions.entities:
            if entity not in KNOWN_ENTITIES:
                out.append((("data_classes", i, "protection", "entities", entity),
                            f"unknown entity type {entity!r}; known: {known_entities}"))
    unit_kind = config.leak.tenant_unit if config is not None else "organization"
    from kvfence.gateway.protection.hook import tenant_unit_of  # the hook imports this module

    owner_of: dict[str, str] = {}
    for i, tenant in enumerate(policy.tenants):
        unit = tenant_unit_of(tenant.organization, tenant.workspace, tenant.name, unit_kind)
        for j, canary in enumerate(tenant.canaries):
            # matched case- and separator-insensitively (leak/scan.py): counted and compared so
            matched_as = compact(leak_fold(canary))
            if len(matched_as) < MIN_CANARY_CHARS:
                out.append((("tenants", i, "canaries", j),
                            f"a canary needs at least {MIN_CANARY_CHARS} letters or digits (got {canary!r}): every "
                            "answer to another tenant that contains it would be withheld as a leak"))
                continue
            other = owner_of.setdefault(matched_as, unit)
            if other != unit:
                out.append((("tenants", i, "canaries", j),
                            f"canary {canary!r} is also configured for {other!r}: a canary must belong to one "
                            f"tenant ({unit_kind}), or each would be flagged for the other's own text"))
    return out
