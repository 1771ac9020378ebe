"""Policy validation: each malformed policy is refused with its line and a message naming the problem."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kvfence.errors import ConfigError
from kvfence.gateway.policy.loader import load_policy, parse_policy

HASH = "a" * 64

GOOD = f"""\
gateway:
  audit_log: sqlite:///audit.db
data_classes:
  - name: public
    allowed_tiers: [shared, dedicated]
  - name: restricted
    allowed_tiers: [on_prem]
    requires:
      max_retention_days: 0
backends:
  - name: hosted
    url: https://api.example.com/v1
    tier: shared
    facts:
      cache_scope: account
      retention_days: 30
  - name: box
    url: http://127.0.0.1:8000/v1
    tier: on_prem
    facts:
      retention_days: 0
tenants:
  - name: alice
    key_sha256: {HASH}
    organization: acme
    default_class: public
"""


def test_good_policy_loads() -> None:
    policy = parse_policy(GOOD)
    assert policy.class_names() == ("public", "restricted")
    assert policy.backends[1].base_url == "http://127.0.0.1:8000/v1"
    assert policy.backends[1].http_client == "auto"  # the lean client for http://, httpx for https://


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_policy(textwrap.dedent(text), source="p.yaml")
    return str(err.value)


MALFORMED = [
    # (what is wrong, edit applied to GOOD, line expected, words the message must contain)
    ("unknown tier", ("tier: shared", "tier: cloud"), 13, ["backends[0].tier", "shared", "dedicated", "on_prem"]),
    ("misspelt field", ("    facts:\n      cache_scope: account", "    fact:\n      cache_scope: account"), 14,
     ["backends[0].fact", "unknown field"]),
    ("bad url", ("url: https://api.example.com/v1", "url: not a url"), 12, ["backends[0].url", "URL"]),
    ("tenant class undefined", ("    default_class: public", "    default_class: secret"), 26,
     ["tenants[0].default_class", "unknown data class 'secret'", "public, restricted"]),
    ("bad key hash", (f"key_sha256: {HASH}", "key_sha256: plaintext-key"), 24, ["tenants[0].key_sha256", "pattern"]),
    ("negative retention", ("      retention_days: 30", "      retention_days: -1"), 16,
     ["backends[0].facts.retention_days", "greater than or equal to 0"]),
    ("unknown cache scope", ("      max_retention_days: 0", "      max_cache_scope: tenant"), 9,
     ["data_classes[1].requires.max_cache_scope", "global", "workspace"]),
    ("duplicate backend", ("  - name: box", "  - name: hosted"), 17, ["backends[1].name", "defined twice"]),
    ("bad audit url", ("audit_log: sqlite:///audit.db", "audit_log: mysql://x"), 2,
     ["gateway.audit_log", "sqlite:///PATH", "postgresql://"]),
    ("class with no possible backend", ("    allowed_tiers: [on_prem]", "    allowed_tiers: [dedicated]"), 7,
     ["data_classes[1].allowed_tiers", "no backend has an allowed tier", "refused"]),
    ("missing backends", (None, None), None, ["backends", "required"]),
    ("duplicate key", ("    tier: shared\n", "    tier: shared\n    tier: dedicated\n"), 14,
     ["duplicate key", "backends[0].tier"]),
    ("empty tiers", ("    allowed_tiers: [shared, dedicated]", "    allowed_tiers: []"), 5,
     ["data_classes[0].allowed_tiers", "at least 1"]),
    ("bad engine version", ("      retention_days: 0\n", "      retention_days: 0\n      engine_version: latest\n"),
     22, ["backends[1].facts.engine_version", "not a version"]),
    ("bad over-cap action", ("    requires:\n      max_retention_days: 0",
                             "    requires:\n      max_retention_days: 0\n    over_cap:\n      action: truncate"),
     11, ["data_classes[1].over_cap.action", "reject", "trim"]),
    ("unknown tenant in per_tenant auth", ("      retention_days: 30\n",
                                           "      retention_days: 30\n    auth:\n      per_tenant:\n        mallory: K\n"),
     19, ["backends[0].auth.per_tenant.mallory", "no tenant named 'mallory'"]),
    ("unknown upstream client", ("    tier: on_prem\n", "    tier: on_prem\n    http_client: aiohttp\n"), 20,
     ["backends[1].http_client", "auto", "httpx"]),
    ("zero tokens per minute", ("    default_class: public\n",
                                "    default_class: public\n    limits:\n      tokens_per_minute: 0\n"),
     28, ["tenants[0].limits.tokens_per_minute", "greater than 0"]),
    ("tokens per minute not a number", ("    default_class: public\n",
                                        "    default_class: public\n    limits:\n      tokens_per_minute: lots\n"),
     28, ["tenants[0].limits.tokens_per_minute", "integer"]),
    ("misspelt limit", ("    default_class: public\n",
                        "    default_class: public\n    limits:\n      token_per_minute: 100\n"),
     28, ["tenants[0].limits.token_per_minute", "unknown field"]),
    ("zero limit window", ("  audit_log: sqlite:///audit.db\n",
                           "  audit_log: sqlite:///audit.db\n  limit_window_s: 0\n"),
     3, ["gateway.limit_window_s", "greater than 0"]),
]


@pytest.mark.parametrize(("what", "edit", "line", "words"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_policy_names_line_and_problem(what: str, edit: tuple[str | None, str | None], line: int | None,
                                                 words: list[str]) -> None:
    if edit[0] is None:
        text = GOOD.split("backends:")[0] + "tenants: []\n"
    else:
        assert edit[0] in GOOD, f"fixture edit for {what!r} does not apply"
        text = GOOD.replace(edit[0], edit[1] or "", 1)
    message = _error(text)
    for word in words:
        assert word in message, f"{what}: {word!r} not in {message!r}"
    if line is not None:
        assert f"p.yaml:{line}:" in message, f"{what}: line {line} not named in {message!r}"


def test_yaml_syntax_error_names_the_line() -> None:
    message = _error("data_classes:\n  - name: public\n    allowed_tiers: [shared\nbackends: []\n")
    assert "p.yaml:4" in message and "invalid YAML" in message


def test_all_problems_are_reported_at_once() -> None:
    text = GOOD.replace("tier: shared", "tier: cloud").replace("default_class: public", "default_class: nope")
    message = _error(text)
    assert "2 problem(s)" in message or "problem(s)" in message
    assert "backends[0].tier" in message


def test_empty_and_non_mapping_files() -> None:
    assert "empty" in _error("")
    assert "mapping" in _error("- a\n- b\n")


def test_missing_file_and_tokenizer(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read policy file"):
        load_policy(tmp_path / "nope.yaml")
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.replace("    tier: on_prem\n", "    tier: on_prem\n    tokenizer: tok\n"))
    with pytest.raises(ConfigError, match=r"backends\[1\]\.tokenizer: no tokenizer.json"):
        load_policy(path)


def test_sample_policy_is_valid() -> None:
    sample = Path(__file__).resolve().parents[2] / "examples" / "gateway.yaml"
    policy = load_policy(sample)
    names = policy.class_names()
    for expected in ("public", "internal", "board", "hr"):
        assert expected in names


def test_protection_blocks_are_checked_with_lines() -> None:
    pytest.importorskip("kvfence.gateway.protection.config")
    text = GOOD.replace("    allowed_tiers: [shared, dedicated]\n",
                        "    allowed_tiers: [shared, dedicated]\n    protection: {pii: scramble}\n")
    message = _error(text)
    assert "p.yaml:6:" in message and "data_classes[0].protection.pii" in message


def test_demo_policy_is_valid() -> None:
    demo = Path(__file__).resolve().parents[2] / "examples" / "gateway-demo.yaml"
    policy = load_policy(demo)
    assert [t.name for t in policy.tenants] == ["acme-alice", "globex-bob"]
    assert set(policy.backends[0].auth.per_organization) == {"acme", "globex"}


def test_tenants_file_is_merged_and_its_errors_name_that_file(tmp_path: Path) -> None:
    policy_path = tmp_path / "p.yaml"
    policy_path.write_text(GOOD + "tenants_file: tenants.yaml\n")
    (tmp_path / "tenants.yaml").write_text(
        f"tenants:\n  - name: bob\n    key_sha256: {'b' * 64}\n    organization: globex\n"
        "    default_class: restricted\n")
    policy = load_policy(policy_path)
    assert [t.name for t in policy.tenants] == ["alice", "bob"]
    (tmp_path / "tenants.yaml").write_text(
        f"- name: bob\n  key_sha256: {'b' * 64}\n  organization: globex\n  default_class: secret\n")
    with pytest.raises(ConfigError) as err:
        load_policy(policy_path)
    assert f"{tmp_path / 'tenants.yaml'}:4: tenants[1].default_class: unknown data class 'secret'" in str(err.value)
    policy_path.write_text(GOOD + "tenants_file: missing.yaml\n")
    with pytest.raises(ConfigError, match=r"p.yaml:27: tenants_file: cannot read"):
        load_policy(policy_path)
