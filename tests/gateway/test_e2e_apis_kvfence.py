"""The official clients' Responses and Messages calls through ``kvfence gateway`` in front of a real
``kvfence serve`` (built-in model), protection on: native routing (kvfence speaks both APIs), Messages
translated to chat for a backend declared openai-only, capacity and exact counts from the engine, and
the gateway's salt splitting the engine's prefix cache by workspace on the new endpoints too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway, KvfenceServe, Process

KEYS = {"eng": "kvf-gw-apis-kv-eng", "eng2": "kvf-gw-apis-kv-eng2", "ops": "kvf-gw-apis-kv-ops"}
MODEL = "kvfence-builtin-random-llama"
RESPONSE_EVENT = TypeAdapter(ResponseStreamEvent)
MESSAGE_EVENT = TypeAdapter(RawMessageStreamEvent)
GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def kvfence_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    proc = KvfenceServe(tmp_path_factory.mktemp("kvserve-apis"), "--cache-scope", "global")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def gateway(kvfence_serve: Process, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    from kvfence.engine.runner.default_model import ensure_default_model

    model_dir = ensure_default_model()  # built by `kvfence serve` above; local files only
    tmp = tmp_path_factory.mktemp("gw-apis-kv")
    common: dict[str, Any] = {
        "url": f"http://127.0.0.1:{kvfence_serve.port}/v1", "tier": "on_prem", "accepts_cache_salt": True,
        "capacity": "kvfence", "tokenizer": str(model_dir), "facts": {"cache_scope": "global", "engine": "kvfence"}}
    policy: dict[str, Any] = {
        "gateway": {"audit_log": f"sqlite:///{tmp}/audit.db", "capacity_refresh_s": 0},
        "data_classes": [{"name": "restricted", "allowed_tiers": ["on_prem"],
                          "requires": {"max_cache_scope": "workspace", "context_within_capacity": True}}],
        "backends": [
            {"name": "kvfence", "models": ["tiny"], "model_map": {"tiny": MODEL}, "apis": ["openai", "anthropic"],
             **common},
            {"name": "kvfence-chat", "models": ["tiny-chat"], "model_map": {"tiny-chat": MODEL}, "apis": ["openai"],
             **common},
        ],
        "tenants": [{"name": n, "key_sha256": hash_api_key(k), "organization": "acme",
                     "workspace": "ops" if n == "ops" else "eng", "default_class": "restricted"}
                    for n, k in KEYS.items()],
    }
    gw = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "kv-test-secret-0123456789"})
    yield gw
    gw.stop()


def oai(gw: Gateway, who: str = "eng") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=KEYS[who], max_retries=0, timeout=60)


def ant(base: str, who: str = "eng") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key=KEYS[who], max_retries=0, timeout=60)


def test_responses_whole_and_streamed_through_the_gateway(gateway: Gateway) -> None:
    with oai(gateway) as client:
        raw = client.responses.with_raw_response.create(model="tiny", input="Say hello.", max_output_tokens=6,
                                                        **GREEDY)
        whole = raw.parse()
        with client.responses.stream(model="tiny", input="Say hello.", max_output_tokens=6, **GREEDY) as stream:
            events = list(stream)
    assert raw.headers["x-kvfence-backend"] == "kvfence"
    Response.model_validate(whole.model_dump(mode="json", warnings=False))
    for event in events:
        RESPONSE_EVENT.validate_python(event.model_dump(mode="json", exclude_unset=True, warnings=False))
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert whole.output_text and streamed == whole.output_text
    assert events[-1].type in ("response.completed", "response.incomplete")
    # the gateway counted the prompt with the engine's own tokenizer and template: the engine's figure
    assert whole.usage is not None and int(raw.headers["x-kvfence-prompt-tokens"]) == whole.usage.input_tokens


@pytest.mark.parametrize("model", ["tiny", "tiny-chat"])  # native, and translated to chat by the gateway
def test_messages_whole_and_streamed_through_the_gateway(gateway: Gateway, model: str) -> None:
    args: dict[str, Any] = {"model": model, "max_tokens": 6, "system": "Be terse.", "extra_body": GREEDY,
                            "messages": [{"role": "user", "content": "Say hello."}]}
    with ant(gateway.root) as client:
        raw = client.messages.with_raw_response.create(**args)
        whole = raw.parse()
        with client.messages.stream(**args) as stream:
            events = list(stream)
            final = stream.get_final_message()
    assert raw.headers["x-kvfence-backend"] == ("kvfence" if model == "tiny" else "kvfence-chat")
    Message.model_validate(whole.model_dump(mode="json", warnings=False))
    for event in events:
        if event.type in ("message_start", "content_block_start", "content_block_delta", "content_block_stop",
                          "message_delta", "message_stop"):
            MESSAGE_EVENT.validate_python(event.model_dump(mode="json", exclude_unset=True, warnings=False))
    assert whole.content[0].type == "text" and final.content[0].type == "text"
    assert whole.content[0].text and final.content[0].text == whole.content[0].text
    assert whole.stop_reason == "max_tokens" and whole.usage.output_tokens == 6


def test_native_and_translated_messages_give_the_same_answer(gateway: Gateway) -> None:
    args: dict[str, Any] = {"max_tokens": 8, "extra_body": GREEDY, "messages": [{"role": "user", "content": "Hi."}]}
    with ant(gateway.root) as client:
        native = client.messages.create(model="tiny", **args)
        translated = client.messages.create(model="tiny-chat", **args)
    assert native.content[0].type == translated.content[0].type == "text"
    assert native.content[0].text == translated.content[0].text


def test_capacity_from_the_engine_caps_both_apis_before_they_leave(gateway: Gateway) -> None:
    with oai(gateway) as client, pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="tiny", input="hello " * 1100, max_output_tokens=8)
    assert err.value.code == "context_length_exceeded" and "over the cap" in str(err.value)
    with ant(gateway.root) as client, pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hello " * 1100}])
    assert "over the cap" in caught.value.body["error"]["message"]  # type: ignore[index]


def test_count_tokens_is_the_engines_count(gateway: Gateway, kvfence_serve: Process) -> None:
    messages: Any = [{"role": "user", "content": "Count these few words, please."}]
    with ant(gateway.root) as client:
        via_gateway = client.messages.count_tokens(model="tiny", system="Be terse.", messages=messages)
    with ant(f"http://127.0.0.1:{kvfence_serve.port}") as client:
        at_engine = client.messages.count_tokens(model=MODEL, system="Be terse.", messages=messages)
    assert via_gateway.input_tokens == at_engine.input_tokens > 0


def test_gateway_salt_splits_the_engine_cache_on_the_new_endpoints(gateway: Gateway) -> None:
    prompt = "The quarterly numbers for the northern region are as follows and must stay private. " * 4

    def cached(who: str) -> int:
        with oai(gateway, who) as client:
            answer = client.responses.create(model="tiny", input=prompt, max_output_tokens=1,
                                             extra_body={"cache_salt": "shared-by-everyone"})
        assert answer.usage is not None
        return int(answer.usage.input_tokens_details.cached_tokens or 0)

    cached("eng")
    assert cached("eng2") > 0      # same workspace: a prefix hit
    assert cached("ops") == 0      # other workspace, same client salt: the gateway's salt keeps them apart
