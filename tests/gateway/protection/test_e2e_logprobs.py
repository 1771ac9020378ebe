"""End to end: placeholders in ``logprobs`` through a real gateway process, streamed and not — the
official ``openai`` client sees the restored values in the tokens, never placeholder text."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway
from tests.gateway.protection.test_e2e_protection import LeakyBackend

KEY = "kvf-gw-test-logprobs-key"
TEXT = "Write to maria.lopez@northwind.com or call (415) 555-0132 before noon"


@pytest.fixture(scope="module")
def backend() -> Iterator[LeakyBackend]:
    b = LeakyBackend()
    b.mode("echo")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def gw(backend: LeakyBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("prot-logprobs")
    policy = {
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0},
        "data_classes": [{"name": "internal", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "leaky", "url": backend.url, "tier": "shared", "capacity": "policy",
                      "facts": {"advertised_context": 8192, "kv_capacity_tokens": 8192}}],
        "tenants": [{"name": "lp-key", "key_sha256": hash_api_key(KEY), "organization": "lp",
                     "default_class": "internal"}],
    }
    g = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield g
    g.stop()


def _check(tokens: list[str], tops: list[list[str]], answer: str) -> None:
    assert answer == TEXT
    assert "".join(tokens) == answer  # the tokens spell the restored answer
    joined = "".join(tokens) + " ".join(t for alts in tops for t in alts)
    for piece in ("<EMAIL", "EMAIL_", "<PHONE", "PHONE_", "_1>"):
        assert piece not in joined
    assert any("maria.lopez@northwind.com" in t for t in tokens)  # whole, in one token


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_logprobs_tokens_carry_restored_values(gw: Gateway, backend: LeakyBackend, stream: bool) -> None:
    c = openai.OpenAI(base_url=gw.url, api_key=KEY, max_retries=0, timeout=30)
    messages = [{"role": "user", "content": TEXT}]
    try:
        if stream:
            answer, tokens, tops = "", [], []
            for chunk in c.chat.completions.create(model="m", messages=messages, stream=True,  # type: ignore[call-overload]
                                                   logprobs=True, top_logprobs=2):
                if not chunk.choices:
                    continue
                answer += chunk.choices[0].delta.content or ""
                for e in (chunk.choices[0].logprobs.content or []) if chunk.choices[0].logprobs else []:
                    tokens.append(e.token)
                    tops.append([t.token for t in e.top_logprobs])
        else:
            out = c.chat.completions.create(model="m", messages=messages, logprobs=True,  # type: ignore[call-overload]
                                            top_logprobs=2)
            answer = out.choices[0].message.content or ""
            tokens = [e.token for e in out.choices[0].logprobs.content]
            tops = [[t.token for t in e.top_logprobs] for e in out.choices[0].logprobs.content]
    finally:
        c.close()
    sent = backend.received()[-1]["messages"][-1]["content"]
    assert "maria.lopez" not in sent and "<EMAIL_1>" in sent  # pseudonymised on the way out
    _check(tokens, tops, answer)
