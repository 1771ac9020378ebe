"""Issue 16, 2: what makes a phrase common, through a real ``kvfence gateway`` and a leaky backend.

- a leak of acme's distinctive span repeated to 3, 5 or 10 further organizations is withheld every
  time, streamed or whole (before: the third passed, after two incidents);
- many keys of one organization, and a mix of organizations and keys, change nothing;
- a withheld answer records nothing, so a streamed and a whole campaign count the same;
- a phrase the model has written for three organizations is common: a tenant sending it afterwards
  (poisoning) makes no answer withheld, and a distinctive leak during it is still caught.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway
from tests.gateway.protection.test_e2e_protection import LeakyBackend, backend  # noqa: F401  (the fixture)

ORGS = ["acme", "mallory", "early0", "early1", "early2", *[f"org{i}" for i in range(12)]]
# globex has four keys; every other organization one
KEYS = {**{org: f"kvf-rep-{org}-key" for org in ORGS}, **{f"globex{k}": f"kvf-rep-globex-{k}" for k in range(4)}}


def leak_policy(backend: LeakyBackend, tmp: Path, keys: dict[str, str],  # noqa: F811
                organization: Callable[[str], str] = lambda name: name) -> dict[str, Any]:
    """A gateway in front of the leaky backend, one tenant per key, leak window 10 minutes."""
    return {
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0,
                    "protection": {"leak": {"window_s": 600}}},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "leaky", "url": backend.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [{"name": f"{name}-key", "key_sha256": hash_api_key(key), "organization": organization(name),
                     "default_class": "internal"} for name, key in keys.items()],
    }


@pytest.fixture(scope="module")
def gw(backend: LeakyBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("rep-gw")
    policy = leak_policy(backend, tmp, KEYS, lambda name: "globex" if name.startswith("globex") else name)
    g = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "r" * 32})
    yield g
    g.stop()


def set_mode(backend: LeakyBackend, mode: str, **extra: Any) -> None:  # noqa: F811
    httpx.post(backend.root + "/_mode", json={"mode": mode, **extra}).raise_for_status()


def ask(gw: Gateway, who: str, text: str = "hello there", stream: bool = False) -> tuple[bool, str]:
    """(withheld, what the client read) for one chat request of ``who``."""
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "stream": stream}
    answer = httpx.post(gw.url + "/chat/completions", json=body, timeout=30,
                        headers={"authorization": f"Bearer {KEYS[who]}"})
    if stream:
        assert answer.status_code == 200, answer.text
        return "cross_tenant_leak" in answer.text, answer.text
    assert answer.status_code in (200, 502), answer.text
    return answer.status_code == 502 and "cross_tenant_leak" in answer.text, answer.text


def secret(tag: str) -> str:
    return (f"Confidential {tag}: Halvorsen Maritime will acquire Tideline Logistics for four hundred and "
            f"twelve million euros, the {tag} board votes on the third of March, nobody else may know.")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("receivers", [3, 5, 10])
def test_a_leak_repeated_to_more_organizations_is_withheld_every_time(
        gw: Gateway, backend: LeakyBackend, receivers: int, stream: bool) -> None:  # noqa: F811
    text = secret(f"rep{receivers}{'s' if stream else 'w'}")
    set_mode(backend, "benign")
    assert not ask(gw, "acme", text)[0]
    set_mode(backend, "fixed", text=f"Here is what I found: {text}")  # stale pages hold acme's prompt
    for i in range(receivers):
        withheld, read = ask(gw, f"org{i}", stream=stream)
        assert withheld, (i, read)
        assert "Tideline Logistics for four hundred" not in read


@pytest.mark.parametrize("stream", [False, True])
def test_many_keys_of_one_organization_and_a_mix_are_withheld_every_time(
        gw: Gateway, backend: LeakyBackend, stream: bool) -> None:  # noqa: F811
    text = secret(f"keys{'s' if stream else 'w'}")
    set_mode(backend, "benign")
    assert not ask(gw, "acme", text)[0]
    set_mode(backend, "fixed", text=f"Sure. {text}")
    for who in ["globex0", "globex1", "globex2", "globex3", "org0", "globex0", "org1", "org2", "globex1", "org3"]:
        assert ask(gw, who, stream=stream)[0], who


def test_a_withheld_answer_records_nothing_so_streamed_and_whole_count_the_same(
        gw: Gateway, backend: LeakyBackend) -> None:  # noqa: F811
    phrase = ("Unfortunately I am unable to provide that information right now, but I can suggest a few "
              "alternatives that might help you with this.")
    set_mode(backend, "benign")
    assert not ask(gw, "mallory", f"Say exactly: {phrase}")[0]  # sent before the model wrote it for anyone
    set_mode(backend, "fixed", text=f"Well. {phrase} Bye.")
    outcomes = [ask(gw, f"org{i}", stream=i % 2 == 1)[0] for i in range(8)]
    # the phrase is all ordinary words: withheld from three organizations (withheld_orgs, default 3),
    # then common; streamed and whole alike (a distinctive span: test_e2e_leak_poisoning_cold.py)
    assert outcomes == [True] * 3 + [False] * 5, outcomes


def test_poisoning_a_phrase_the_model_already_writes_withholds_nothing(
        gw: Gateway, backend: LeakyBackend) -> None:  # noqa: F811
    refusal = ("I am sorry, but I cannot help with that request today. If you have another question about "
               "your account, I would be glad to help with something else.")
    set_mode(backend, "fixed", text=refusal)  # the model writes its refusal for three organizations
    assert not any(ask(gw, f"early{i}", stream=i == 1)[0] for i in range(3))
    set_mode(backend, "benign")
    assert not ask(gw, "mallory", f"Say exactly: {refusal}")[0]
    set_mode(backend, "fixed", text=refusal)
    outcomes = [ask(gw, who, stream=i % 2 == 0)[0] for i, who in enumerate(["org4", "org5", "org6", "globex2",
                                                                            "org7", "org8", "org9", "org10"])]
    assert not any(outcomes), outcomes
    text = secret("during-campaign")  # a distinctive leak during the campaign is still caught
    set_mode(backend, "benign")
    assert not ask(gw, "acme", text)[0]
    set_mode(backend, "fixed", text=f"{refusal} {text}")
    assert ask(gw, "org11")[0]
    assert ask(gw, "org11", stream=True)[0]
