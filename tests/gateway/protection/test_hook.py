"""The protection hook on its own: rewrite, raise the class, block, fail closed, restore, stop leaks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kvfence.errors import ConfigError
from kvfence.gateway.errors import DetectorFailure, GatewayRequestError, LeakSuspected, RequestBlocked
from kvfence.gateway.hooks import RequestContext
from kvfence.gateway.policy.schema import Policy
from kvfence.gateway.policy.tenants import GatewayTenant
from kvfence.gateway.protection import build_hooks
from kvfence.gateway.protection.hook import ProtectionHook

CLASSES = ("public", "internal", "restricted")


class Incidents:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def record_incident(self, *, kind: str, request_id: str, tenants: Sequence[str],
                        details: Mapping[str, Any], incident_id: str | None = None) -> str:
        self.rows.append({"kind": kind, "request_id": request_id, "tenants": list(tenants), "details": dict(details)})
        return incident_id or f"inc_test{len(self.rows)}"


def make_policy(protection: dict[str, Any] | None = None, **class_protection: dict[str, Any]) -> Policy:
    return Policy.model_validate({
        "gateway": {"protection": protection or {}},
        "data_classes": [
            {"name": "public", "allowed_tiers": ["shared", "dedicated", "on_prem"],
             "protection": class_protection.get("public", {})},
            {"name": "internal", "allowed_tiers": ["dedicated", "on_prem"],
             "protection": class_protection.get("internal", {})},
            {"name": "restricted", "allowed_tiers": ["on_prem"],
             "protection": class_protection.get("restricted", {"pii": "pass"})},
        ],
        "backends": [{"name": "b", "url": "http://127.0.0.1:9/v1", "tier": "shared"}],
    })


def make_hook(policy: Policy) -> tuple[ProtectionHook, Incidents]:
    incidents = Incidents()
    hooks = build_hooks(policy, incidents=incidents, registry=None)
    assert len(hooks) == 1 and isinstance(hooks[0], ProtectionHook)
    return hooks[0], incidents


def ctx(org: str = "acme", data_class: str = "public", endpoint: str = "chat", stream: bool = False) -> RequestContext:
    tenant = GatewayTenant(name=f"{org}-key", organization=org, workspace="default", default_class=data_class)
    return RequestContext(request_id=f"req-{org}-{time.monotonic_ns()}", tenant=tenant, data_class=data_class,
                          backend=None, endpoint=endpoint, class_order=CLASSES, stream=stream)


def chat(*contents: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": c} for c in contents]}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def answer_through(hook: ProtectionHook, c: RequestContext, text: str, chunk: int = 3) -> str:
    f = hook.response_filter(c)
    return "".join(f.feed(text[i:i + chunk]) for i in range(0, len(text), chunk)) + f.finish()


def test_pseudonymises_every_message_and_restores_the_answer() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    body = {"model": "m", "messages": [
        {"role": "system", "content": "Support desk for ann@acme.io"},
        {"role": "user", "content": [{"type": "text", "text": "Call me at (415) 555-0132, I am ann@acme.io"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "crm", "arguments": '{"email": "bo@acme.io"}'}}]},
        {"role": "tool", "tool_call_id": "1", "content": "card 4539 1488 0343 6467 on file"},
    ]}
    out = run(hook.on_request(c, body))
    sent = str(out["messages"])
    assert "ann@acme.io" not in sent and "555-0132" not in sent and "4539" not in sent and "bo@acme.io" not in sent
    assert out["messages"][0]["content"] == "Support desk for <EMAIL_1>"
    assert "<EMAIL_1>" in out["messages"][1]["content"][0]["text"]
    assert body["messages"][0]["content"] == "Support desk for ann@acme.io"  # caller's body untouched
    assert answer_through(hook, c, "I will email <EMAIL_1> and call <PHONE_1>.") == \
        "I will email ann@acme.io and call (415) 555-0132."
    assert c.annotations["protection"]["findings"]["EMAIL_ADDRESS"] == 3


def test_completions_prompt_is_scanned_and_token_ids_are_refused() -> None:
    hook, _ = make_hook(make_policy())
    out = run(hook.on_request(ctx(endpoint="completions"), {"model": "m", "prompt": ["mail x@y.io", "ok"]}))
    assert out["prompt"] == ["mail <EMAIL_1>", "ok"]
    with pytest.raises(GatewayRequestError, match="token ids"):
        run(hook.on_request(ctx(endpoint="completions"), {"model": "m", "prompt": [1, 2, 3]}))


def test_secrets_are_stripped_and_stay_stripped_in_the_answer() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    out = run(hook.on_request(c, chat("why does AKIA4QZ7XWJ2LTRN5KDM fail?")))
    assert out["messages"][0]["content"] == "why does <AWS_ACCESS_KEY_1> fail?"
    assert answer_through(hook, c, "Rotate <AWS_ACCESS_KEY_1> now.") == "Rotate <AWS_ACCESS_KEY_1> now."


def test_national_id_raises_the_class_and_its_actions_apply() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    out = run(hook.on_request(c, chat("Employee SSN 536-22-1234, email ann@acme.io")))
    assert c.data_class == "restricted"
    assert c.annotations["class_raised_by"] == ["detector:US_SSN"]
    # restricted goes on-prem only and its policy passes personal data through
    assert out["messages"][0]["content"] == "Employee SSN 536-22-1234, email ann@acme.io"


def test_block_action_refuses_the_request() -> None:
    hook, _ = make_hook(make_policy(public={"entities": {"CREDIT_CARD": "block"}}))
    with pytest.raises(RequestBlocked, match="CREDIT_CARD"):
        run(hook.on_request(ctx(), chat("my card is 4539 1488 0343 6467")))
    hook, _ = make_hook(make_policy(public={"secrets": "block"}))
    with pytest.raises(RequestBlocked, match="GITHUB_TOKEN"):
        run(hook.on_request(ctx(), chat("token ghp_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u")))


def test_detector_error_and_timeout_fail_closed() -> None:
    hook, _ = make_hook(make_policy({"detector_timeout_s": 0.05}))

    def slow(text: str) -> list[Any]:
        time.sleep(0.5)
        return []

    hook._detector.scan = slow  # type: ignore[method-assign]
    with pytest.raises(DetectorFailure, match="did not finish"):
        run(hook.on_request(ctx(), chat("hello " * 1000)))  # long enough for the worker thread

    def broken(text: str) -> list[Any]:
        raise RuntimeError("regex engine exploded")

    hook._detector.scan = broken  # type: ignore[method-assign]
    for text in ("hello", "hello " * 1000):  # inline and in the worker thread
        with pytest.raises(DetectorFailure, match="fail closed"):
            run(hook.on_request(ctx(), chat(text)))


def test_leak_of_another_tenants_prompt_is_withheld_with_an_incident() -> None:
    hook, incidents = make_hook(make_policy())
    secret = ("Board minutes: we will lay off the entire Rotterdam warehouse team of forty people "
              "in the second week of January and announce it after the holidays.")
    run(hook.on_request(ctx("acme"), chat(secret)))
    c = ctx("globex", stream=True)
    run(hook.on_request(c, chat("Write a haiku about autumn")))
    f = hook.response_filter(c)
    emitted = []
    with pytest.raises(LeakSuspected) as caught:
        for word in ("Leaves fall. " + secret).split(" "):
            emitted.append(f.feed(word + " "))
    assert caught.value.incident_id == "inc_test1"
    assert "Rotterdam" not in "".join(emitted) or "January" not in "".join(emitted)
    row = incidents.rows[0]
    assert row["kind"] == "cross_tenant_leak" and row["tenants"] == ["globex", "acme"]
    assert row["details"]["evidence_fingerprints"] and "Rotterdam" not in str(row)
    with pytest.raises(LeakSuspected):
        f.finish()


def test_canaries_are_injected_and_a_foreign_one_is_caught() -> None:
    hook, incidents = make_hook(make_policy({"leak": {"canaries": True}}))
    a = ctx("acme")
    out = run(hook.on_request(a, {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "hi"}]}))
    system = out["messages"][0]["content"]
    assert system.startswith("Be brief.") and "kvfc-" in system
    canary = next(w for w in system.split() if w.startswith("kvfc-"))
    b = ctx("globex")
    run(hook.on_request(b, chat("hello")))
    with pytest.raises(LeakSuspected):
        answer_through(hook, b, f"ok {canary} done")
    assert incidents.rows[-1]["details"]["detector"] == "canary"


def test_bad_configuration_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"gateway\.protection\.leak\.ngram"):
        make_hook(make_policy({"leak": {"ngram": 1}}))
    with pytest.raises(ConfigError, match=r"data_classes\[public\].protection.pii"):
        make_hook(make_policy(public={"pii": "encrypt"}))
    with pytest.raises(ConfigError, match="unknown data classes"):
        make_hook(make_policy({"raise_class": {"US_SSN": "top-secret"}}))
    with pytest.raises(ConfigError, match="unknown entity types US_SNN"):
        make_hook(make_policy(public={"entities": {"US_SNN": "block"}}))
    with pytest.raises(ConfigError, match="redis_url"):
        make_hook(make_policy({"leak": {"index": "redis"}}))


def test_disabled_protection_builds_no_hook() -> None:
    assert build_hooks(make_policy({"enabled": False}), incidents=Incidents()) == []


def test_configured_canaries_only_for_their_tenant() -> None:
    policy = make_policy()
    policy = Policy.model_validate({**policy.model_dump(mode="json"), "tenants": [
        {"name": "acme-key", "key_sha256": "0" * 64, "organization": "acme", "default_class": "public",
         "canaries": ["ACME-CANARY-7731"]}]})
    hook, incidents = make_hook(policy)
    a = ctx("acme")
    out = run(hook.on_request(a, chat("hi")))
    assert "ACME-CANARY-7731" in out["messages"][0]["content"]
    b = ctx("globex")
    out = run(hook.on_request(b, chat("hello")))
    assert out["messages"] == [{"role": "user", "content": "hello"}]  # no canary for globex
    with pytest.raises(LeakSuspected):
        answer_through(hook, b, "the code is ACME-CANARY-7731 ok")
    assert incidents.rows[-1]["tenants"] == ["globex", "acme"]


def test_health_topic_raises_the_class_without_replacing_text() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    text = "My father was diagnosed with diabetes; which medication dosage should we ask about?"
    out = run(hook.on_request(c, chat(text)))
    assert c.data_class == "restricted" and c.annotations["class_raised_by"] == ["topic:health"]
    assert out["messages"][0]["content"] == text
    c2 = ctx()
    run(hook.on_request(c2, chat("Please be patient, the deploy takes a while.")))  # one weak cue only
    assert c2.data_class == "public"
    hook, _ = make_hook(make_policy({"raise_on_topics": {"hr": "internal"}}))
    c3 = ctx()
    run(hook.on_request(c3, chat("Draft the termination letter and the severance terms.")))
    assert c3.data_class == "internal"
    with pytest.raises(ConfigError, match="raise_on_topics"):
        make_hook(make_policy({"raise_on_topics": {"astrology": "internal"}}))


def test_leak_index_failure_fails_closed() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    run(hook.on_request(c, chat("a perfectly ordinary question about shipping times")))
    monitor = hook._monitor
    assert monitor is not None

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("redis went away")

    monitor.index.add = broken  # type: ignore[method-assign]
    monitor.index.owners = broken  # type: ignore[method-assign]
    with pytest.raises(DetectorFailure, match="leak-detection index"):
        run(hook.on_request(ctx(), chat("another question about invoices and refunds")))
    f = hook.response_filter(c)
    with pytest.raises(DetectorFailure, match="withheld"):
        f.feed("An answer of several words that needs looking up in the index now.")


def test_completions_suffix_and_legacy_function_call_are_scanned() -> None:
    # Both are sent upstream: a value in them is pseudonymised like one in the prompt.
    hook, _ = make_hook(make_policy())
    out = run(hook.on_request(ctx(endpoint="completions"),
                              {"model": "m", "prompt": "Dear x@y.io,", "suffix": "Sent to carol@globex.io"}))
    assert out["prompt"] == "Dear <EMAIL_1>," and out["suffix"] == "Sent to <EMAIL_2>"
    out = run(hook.on_request(ctx(endpoint="completions"), {"model": "m", "suffix": "carol@globex.io"}))
    assert out["suffix"] == "<EMAIL_1>"
    body = {"model": "m", "messages": [
        {"role": "user", "content": "look up carol"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "lookup", "arguments": '{"email": "carol@globex.io"}'}},
        {"role": "function", "name": "lookup", "content": "carol is at +44 20 7946 0958"},
    ]}
    out = run(hook.on_request(ctx(), body))
    assert out["messages"][1]["function_call"] == {"name": "lookup", "arguments": '{"email": "<EMAIL_1>"}'}
    assert out["messages"][2]["content"] == "carol is at <PHONE_1>"
    assert body["messages"][1]["function_call"]["arguments"] == '{"email": "carol@globex.io"}'  # input untouched


def test_start_up_refuses_what_gateway_check_refuses() -> None:
    # the hook runs the same name checks as `kvfence gateway check` (policy_checks.py)
    with pytest.raises(ConfigError, match=r"disabled_rules\.0: 'ipv7' is neither a rule nor an entity type"):
        make_hook(make_policy({"disabled_rules": ["ipv7"]}))
    make_hook(make_policy({"disabled_rules": ["ipv6", "EMAIL_ADDRESS"]}))


def test_canary_goes_into_the_callers_system_message_whatever_its_shape() -> None:
    # One system message, first: chat templates (Llama, Mistral...) refuse a second one.
    hook, _ = make_hook(make_policy({"leak": {"canaries": True}}))
    parts = [{"type": "text", "text": "Be brief."}]
    out = run(hook.on_request(ctx("acme"), {"model": "m", "messages": [{"role": "system", "content": parts},
                                                                       {"role": "user", "content": "hi"}]}))
    assert [m["role"] for m in out["messages"]] == ["system", "user"]
    system = out["messages"][0]["content"]
    assert system[0] == parts[0] and "kvfc-" in system[1]["text"] and system[1]["type"] == "text"
    out = run(hook.on_request(ctx("acme"), {"model": "m", "messages": [{"role": "developer", "content": "Be brief."},
                                                                       {"role": "user", "content": "hi"}]}))
    assert [m["role"] for m in out["messages"]] == ["developer", "user"] and "kvfc-" in out["messages"][0]["content"]
    out = run(hook.on_request(ctx("acme"), chat("hi")))
    assert [m["role"] for m in out["messages"]] == ["system", "user"]
