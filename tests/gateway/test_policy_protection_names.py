"""`kvfence gateway check` refuses protection settings whose names refer to nothing, with their line.

Each of these started a policy check with "OK" before, though the gateway then either refused to
start (a raise_class to an unknown class) or silently ignored the setting (a misspelt entity, so
``CREDITCARD: block`` blocked nothing), or withheld ordinary answers (a one-letter canary).
"""

from __future__ import annotations

import textwrap

import pytest

from kvfence.errors import ConfigError
from kvfence.gateway.policy.loader import parse_policy

pytest.importorskip("kvfence.gateway.protection.config")

BASE = """\
gateway:
  audit_log: sqlite:///audit.db
  protection: {PROTECTION}
data_classes:
  - name: public
    allowed_tiers: [shared]
    protection: {CLASS}
backends:
  - name: box
    url: http://127.0.0.1:8000/v1
    tier: shared
tenants:
  - name: alice
    key_sha256: {A}
    organization: acme
    default_class: public
    canaries: {CA}
  - name: bob
    key_sha256: {B}
    organization: globex
    default_class: public
    canaries: {CB}
"""


def policy_text(protection: str = "{}", klass: str = "{}", ca: str = "[]", cb: str = "[]") -> str:
    return (BASE.replace("{PROTECTION}", protection).replace("{CLASS}", klass).replace("{CA}", ca)
            .replace("{CB}", cb).replace("{A}", "a" * 64).replace("{B}", "b" * 64))


def error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_policy(textwrap.dedent(text), source="p.yaml")
    return str(err.value)


def test_good_names_pass() -> None:
    parse_policy(policy_text("{raise_class: {US_SSN: public}, disabled_rules: [ipv6, CREDIT_CARD]}",
                             "{entities: {CREDIT_CARD: block}}", '["ACME-CANARY-7731"]', '["GLOBEX-CANARY-4412"]'))


@pytest.mark.parametrize(("protection", "klass", "ca", "cb", "line", "words"), [
    ("{}", "{entities: {CREDITCARD: block}}", "[]", "[]", 7,
     ["data_classes[0].protection.entities.CREDITCARD", "unknown entity type", "CREDIT_CARD"]),
    ("{raise_class: {US_SSN: secret}}", "{}", "[]", "[]", 3,
     ["gateway.protection.raise_class.US_SSN", "unknown data class 'secret'"]),
    ("{raise_class: {SSN: public}}", "{}", "[]", "[]", 3, ["raise_class.SSN", "unknown entity type"]),
    ("{raise_on_topics: {finance: public}}", "{}", "[]", "[]", 3, ["raise_on_topics.finance", "unknown topic"]),
    ("{disabled_rules: [ipv7]}", "{}", "[]", "[]", 3, ["gateway.protection.disabled_rules[0]", "'ipv7'", "ipv6"]),
    ("{}", "{}", '["a"]', "[]", 17, ["tenants[0].canaries[0]", "at least 8 letters or digits"]),
    ("{}", "{}", '["SHARED-CANARY-1"]', '["SHARED-CANARY-1"]', 22,
     ["tenants[1].canaries[0]", "also configured for 'acme'"]),
])
def test_names_that_refer_to_nothing_are_refused_with_their_line(protection: str, klass: str, ca: str, cb: str,
                                                                  line: int, words: list[str]) -> None:
    message = error(policy_text(protection, klass, ca, cb))
    assert f"p.yaml:{line}:" in message, message
    for word in words:
        assert word in message, message


def test_same_canary_inside_one_tenant_unit_is_fine() -> None:
    text = policy_text(ca='["ACME-CANARY-7731"]').replace("organization: globex", "organization: acme")
    parse_policy(text.replace('canaries: []', 'canaries: ["ACME-CANARY-7731"]'))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://127.0.0.1:8000/"])
def test_a_backend_url_without_a_path_is_refused(url: str) -> None:
    message = error(policy_text().replace("http://127.0.0.1:8000/v1", url))
    assert "p.yaml:10:" in message and "backends[0].url" in message and "http://127.0.0.1:8000/v1" in message
