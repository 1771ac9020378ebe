"""The real protection hook with one more personal-data rule, for restoration tests whose values hold
what no built-in detector finds whole: quotes, backslashes, newlines, JSON syntax.

Whatever stands between ``⟦`` and ``⟧`` is a ``PERSON`` (placeholder ``<PERSON_n>``), next to every
built-in rule (no Presidio, no leak detection). Loaded by a gateway through the policy's
``gateway.hooks: ["tests.gateway.protection.codename_hooks:build"]`` with ``load_protection: false``.
"""

from __future__ import annotations

import re
from typing import Any

from kvfence.gateway.policy.schema import Policy
from kvfence.gateway.protection.config import parse_protection_config
from kvfence.gateway.protection.detect.detector import Detector
from kvfence.gateway.protection.detect.findings import Category, Finding
from kvfence.gateway.protection.detect.recognizers.pii import PII_RULES, PRIVATE_IP_RULES
from kvfence.gateway.protection.detect.recognizers.secrets import SECRET_RULES
from kvfence.gateway.protection.detect.scanner import Rule, RuleSet
from kvfence.gateway.protection.hook import ProtectionHook
from kvfence.gateway.protection.metrics import ProtectionMetrics

CODENAME = Rule("test_codename", "PERSON", Category.PII, re.compile(r"(?<=⟦)[^⟦⟧]{1,300}(?=⟧)"), score=0.9)


class _PiiWithCodenames:
    def __init__(self) -> None:
        self._rules = RuleSet([*(r for r in PII_RULES if r.name not in PRIVATE_IP_RULES), CODENAME])

    def detect(self, text: str) -> list[Finding]:
        return self._rules.raw_findings(text)


def make_hook(policy: Policy, *, incidents: Any, registry: Any = None) -> ProtectionHook:
    detector = Detector(_PiiWithCodenames(), RuleSet(SECRET_RULES))
    return ProtectionHook(policy, parse_protection_config(policy.gateway.protection), detector, monitor=None,
                          incidents=incidents, metrics=ProtectionMetrics(registry))


def build(policy: Policy, *, incidents: Any, registry: Any = None) -> list[Any]:
    return [make_hook(policy, incidents=incidents, registry=registry)]
