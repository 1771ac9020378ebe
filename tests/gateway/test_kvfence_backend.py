"""The gateway in front of a real `kvfence serve` process (built-in model) and a recording test backend.

Beyond routing, this checks two things only a real engine shows: capacity discovered from kvfence's
``/v1/capacity``, with exact token counts from the backend's own tokenizer; and that the gateway's
salt really splits the engine's prefix cache by workspace (``cached_tokens`` in the usage).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import FakeBackend, Gateway, KvfenceServe, Process

KEYS = {"eng": "kvf-gw-kv-eng", "eng2": "kvf-gw-kv-eng2", "ops": "kvf-gw-kv-ops"}
MODEL = "kvfence-builtin-random-llama"


@pytest.fixture(scope="module")
def kvfence_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    proc = KvfenceServe(tmp_path_factory.mktemp("kvserve"), "--cache-scope", "global")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def gateway(kvfence_serve: Process, backend_a: FakeBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    from kvfence.engine.runner.default_model import ensure_default_model

    model_dir = ensure_default_model()  # built by `kvfence serve` above; local files only
    tmp = tmp_path_factory.mktemp("gwkv")
    policy: dict[str, Any] = {
        "gateway": {"audit_log": f"sqlite:///{tmp}/audit.db", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [
            {"name": "public", "allowed_tiers": ["shared", "on_prem"]},
            {"name": "restricted", "allowed_tiers": ["on_prem"],
             "requires": {"max_cache_scope": "workspace", "context_within_capacity": True}},
        ],
        "backends": [
            {"name": "shared-a", "url": backend_a.url, "tier": "shared", "priority": 0},
            {"name": "kvfence", "url": f"http://127.0.0.1:{kvfence_serve.port}/v1", "tier": "on_prem",
             "models": ["tiny"], "model_map": {"tiny": MODEL}, "accepts_cache_salt": True,
             "capacity": "kvfence", "tokenizer": str(model_dir),
             "facts": {"cache_scope": "global", "engine": "kvfence", "engine_version": "0.1.0"}},
        ],
        "tenants": [
            {"name": n, "key_sha256": hash_api_key(k), "organization": "acme",
             "workspace": "ops" if n == "ops" else "eng", "default_class": "restricted"}
            for n, k in KEYS.items()
        ],
    }
    gw = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "kv-test-secret-0123456789"})
    yield gw
    gw.stop()


def _client(gw: Gateway, who: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=KEYS[who], max_retries=0)


def test_restricted_class_is_served_by_kvfence(gateway: Gateway) -> None:
    with _client(gateway, "eng") as c:
        raw = c.chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=4)
        answer = raw.parse()
        assert raw.headers["x-kvfence-backend"] == "kvfence"
        assert answer.model == MODEL and answer.usage is not None
        # the gateway counted with the engine's own tokenizer and template: same number as the engine
        assert int(raw.headers["x-kvfence-prompt-tokens"]) == answer.usage.prompt_tokens
        stream = c.completions.create(model="tiny", prompt="once upon a time", max_tokens=4, stream=True)
        assert sum(1 for _ in stream) >= 1


def test_capacity_is_discovered_from_kvfence(gateway: Gateway) -> None:
    health = httpx.get(gateway.root + "/health").json()["backends"]["kvfence"]
    assert health["kv_capacity_tokens"] == 1024 and "kvfence" in health["capacity_source"]
    assert "tokenizer" in health["token_count"]
    with _client(gateway, "eng") as c, pytest.raises(openai.BadRequestError) as err:
        c.completions.create(model="tiny", prompt="hello " * 1100, max_tokens=8)
    assert err.value.code == "context_length_exceeded" and "over the cap" in str(err.value)


def test_scoring_a_prompt_of_exactly_the_context_passes_the_gateway(gateway: Gateway, kvfence_serve: Process) -> None:
    # lm-eval's loglikelihood call: echo + logprobs, max_tokens 0. kvfence computes the prompt only for
    # it and says so on its capacity endpoint, so the gateway counts no position past the prompt.
    capacity = httpx.get(f"http://127.0.0.1:{kvfence_serve.port}/v1/capacity").json()
    assert capacity["scores_max_tokens_0"] is True
    max_len = int(capacity["max_model_len"])
    prompt = [(7 * i) % 200 + 10 for i in range(max_len)]
    with _client(gateway, "eng") as c:
        answer = c.completions.create(model="tiny", prompt=prompt, max_tokens=0, echo=True, logprobs=1)
        assert answer.usage is not None and answer.usage.prompt_tokens == max_len
        assert answer.usage.completion_tokens == 0
        logprobs = answer.choices[0].logprobs
        assert logprobs is not None and logprobs.token_logprobs is not None
        assert len(logprobs.token_logprobs) == max_len and logprobs.token_logprobs[0] is None
        # one token more still does not fit: refused by the gateway, before the backend
        with pytest.raises(openai.BadRequestError) as err:
            c.completions.create(model="tiny", prompt=[*prompt, 11], max_tokens=0, echo=True, logprobs=1)
        assert err.value.code == "context_length_exceeded" and "over the cap" in str(err.value)
        # and a generating call of the full context is refused as before: it needs one more position
        with pytest.raises(openai.BadRequestError) as err:
            c.completions.create(model="tiny", prompt=prompt, max_tokens=1)
        assert "over the cap" in str(err.value)


def test_gateway_salt_splits_the_engine_cache_by_workspace(gateway: Gateway) -> None:
    prompt = "The quarterly numbers for the northern region are as follows and must stay private. " * 4

    def cached(who: str) -> int:
        with _client(gateway, who) as c:
            answer = c.completions.create(model="tiny", prompt=prompt, max_tokens=1,
                                          extra_body={"cache_salt": "shared-by-everyone"})
        assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
        return int(answer.usage.prompt_tokens_details.cached_tokens or 0)

    cached("eng")                  # warm the cache in workspace eng
    assert cached("eng2") > 0      # same workspace: a prefix hit
    assert cached("ops") == 0      # other workspace, same client salt: the gateway salt keeps them apart
