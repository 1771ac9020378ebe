"""``/v1/responses``, ``/v1/messages`` and ``/v1/embeddings`` through a real ``kvfence gateway`` process.

The callers are the official ``openai`` and ``anthropic`` clients; the backend is a real process on
loopback that speaks each API natively (``apis_backend.py``) and puts the caller's text back into
every field with model text (Responses output text, reasoning summary, function-call arguments;
Messages thinking, text, tool-use input). Every answer and stream event validates against the SDK's
own models. For each API: an e-mail and a card leave as placeholders and come back restored, streamed
one character at a time (a split at every offset) and in larger pieces; a key is never restored;
another tenant's prompt or canary in an answer is withheld; a class raised by a finding routes to the
backend it allows; an over-capacity request is refused before it leaves.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway, Process
from tests.netutil import free_port

RESPONSE_EVENT = TypeAdapter(ResponseStreamEvent)
MESSAGE_EVENT = TypeAdapter(RawMessageStreamEvent)
KEYS = {org: f"kvf-gw-apis-{org}-key" for org in ("acme", "globex", "limited", "limited2")}
KEY = "ghp_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u"
TEXT = f"Write to maria.lopez@northwind.com, card 4111 1111 1111 1111; deploy key {KEY} please."
EXPECTED = TEXT.replace(KEY, "<GITHUB_TOKEN_1>")  # a secret is never restored
SECRET = ("Confidential: Halvorsen Maritime will acquire Tideline Logistics for four hundred million euros, "
          "announcement planned after the board meeting on the third of March.")


class ApisBackend(Process):
    def __init__(self) -> None:
        port = free_port()
        super().__init__([sys.executable, "-m", "tests.gateway.apis_backend", "--port", str(port)], port)
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + "/v1"

    def mode(self, mode: str, chunk: int = 5, only: str | None = None) -> None:
        httpx.post(self.root + "/_mode", json={"mode": mode, "chunk": chunk, "only": only}).raise_for_status()

    def received(self) -> list[dict[str, Any]]:
        return list(httpx.get(self.root + "/_received").json())

    def clear(self) -> None:
        httpx.delete(self.root + "/_received").raise_for_status()


@pytest.fixture(scope="module")
def shared() -> Iterator[ApisBackend]:
    b = ApisBackend()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def onprem() -> Iterator[ApisBackend]:
    b = ApisBackend()
    yield b
    b.stop()


def _policy(tmp: Any, backends: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "gateway": {"audit_log": f"sqlite:///{tmp / 'audit.db'}", "capacity_refresh_s": 0,
                    "protection": {"leak": {"window_s": 600, "canaries": True},
                                   "raise_class": {"US_SSN": "restricted"}}},
        "data_classes": [
            {"name": "internal", "allowed_tiers": ["shared", "on_prem"]},
            {"name": "restricted", "allowed_tiers": ["on_prem"]},
            {"name": "embed-block", "allowed_tiers": ["shared", "on_prem"], "protection": {"embeddings": "block"}},
            {"name": "stateful", "allowed_tiers": ["shared", "on_prem"], "allow_stored_responses": True},
        ],
        "backends": backends,
        "tenants": [{"name": f"{org}-key", "key_sha256": hash_api_key(key), "organization": org,
                     "default_class": "internal",
                     **({"limits": {"tokens_per_minute": 300}} if org.startswith("limited") else {})}
                    for org, key in KEYS.items()],
    }


FACTS = {"advertised_context": 2048, "kv_capacity_tokens": 4096}


@pytest.fixture(scope="module")
def gw(shared: ApisBackend, onprem: ApisBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("apis-gw")
    backends = [{"name": "shared", "url": shared.url, "tier": "shared", "capacity": "policy", "priority": 0,
                 "apis": ["openai", "anthropic"], "facts": FACTS},
                {"name": "onprem", "url": onprem.url, "tier": "on_prem", "capacity": "policy", "priority": 1,
                 "apis": ["openai", "anthropic"], "facts": {**FACTS, "keeps_response_state": True}}]
    g = Gateway(_policy(tmp, backends), tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield g
    g.stop()


@pytest.fixture(scope="module")
def chat_only_gw(shared: ApisBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The same backend declared as speaking only OpenAI's API: Messages requests are translated to chat."""
    tmp = tmp_path_factory.mktemp("apis-chat-gw")
    backends = [{"name": "chat-only", "url": shared.url, "tier": "on_prem", "capacity": "policy",
                 "apis": ["openai"], "facts": FACTS}]
    g = Gateway(_policy(tmp, backends), tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield g
    g.stop()


def oai(gw: Gateway, org: str = "acme") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=KEYS[org], max_retries=0, timeout=30)


def ant(gw: Gateway, org: str = "acme") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.root, api_key=KEYS[org], max_retries=0, timeout=30)


def _sent_text(backend: ApisBackend) -> str:
    return json.dumps(backend.received()[-1]["body"], ensure_ascii=False)


def _left_as_placeholders(backend: ApisBackend) -> None:
    sent = _sent_text(backend)
    assert "maria.lopez" not in sent and "4111" not in sent and "ghp_" not in sent, sent
    assert "<EMAIL_1>" in sent and "<CARD_1>" in sent and "<GITHUB_TOKEN_1>" in sent, sent


# -- Responses ---------------------------------------------------------------------------------------

def responses_answer(gw: Gateway, text: str, *, stream: bool, org: str = "acme", **extra: Any) -> Response:
    with oai(gw, org) as client:
        if not stream:
            answer = client.responses.create(model="m", input=text, **extra)
            Response.model_validate(answer.model_dump(mode="json", warnings=False))
            return answer
        with client.responses.stream(model="m", input=text, **extra) as events:
            seen = list(events)
            final = events.get_final_response()
    for event in seen:
        RESPONSE_EVENT.validate_python(event.model_dump(mode="json", exclude_unset=True, warnings=False))
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    deltas = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
    assert deltas == next(e.text for e in seen if e.type == "response.output_text.done")
    arguments = "".join(e.delta for e in seen if e.type == "response.function_call_arguments.delta")
    assert arguments == next(e.arguments for e in seen if e.type == "response.function_call_arguments.done")
    return final


@pytest.mark.parametrize(("stream", "chunk"), [(False, 5), (True, 1), (True, 3), (True, 8)])
def test_responses_pseudonymised_out_restored_back(gw: Gateway, shared: ApisBackend, stream: bool, chunk: int) -> None:
    shared.mode("echo", chunk)
    answer = responses_answer(gw, TEXT, stream=stream, instructions="Be brief.")
    _left_as_placeholders(shared)
    assert answer.output_text == EXPECTED
    call = next(o for o in answer.output if o.type == "function_call")
    assert json.loads(call.arguments) == {"to": EXPECTED}
    reasoning = next(o for o in answer.output if o.type == "reasoning")
    assert reasoning.summary[0].text == EXPECTED
    assert answer.instructions == "Be brief."  # echoed as the client sent it: no canary, no placeholder


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field", ["text", "reasoning", "arguments"])
def test_responses_leak_of_another_tenants_prompt_is_withheld(gw: Gateway, shared: ApisBackend, stream: bool,
                                                              field: str) -> None:
    shared.mode("echo")
    responses_answer(gw, SECRET, stream=False, org="acme")
    shared.mode("leak", 4, only=field)  # the next answer is generated over acme's prompt, in one field
    with oai(gw, "globex") as client:
        if not stream:
            with pytest.raises(openai.APIStatusError) as caught:
                client.responses.create(model="m", input="What is the capital of Portugal?")
            assert caught.value.status_code == 502 and "Tideline" not in str(caught.value.body)
            assert caught.value.code == "cross_tenant_leak_suspected"
            return
        with client.responses.stream(model="m", input="What is the capital of Portugal?") as events:
            seen = list(events)
    for event in seen:
        RESPONSE_EVENT.validate_python(event.model_dump(mode="json", exclude_unset=True, warnings=False))
    assert seen[-1].type == "error" and seen[-1].code == "cross_tenant_leak_suspected"
    assert not any(e.type == "response.completed" for e in seen)
    # streamed, a leak is stopped once its run of foreign n-grams is long enough (7 words by default):
    # the words before that went out, the rest of the other tenant's prompt never does
    assert "four hundred million" not in json.dumps([e.model_dump(mode="json", warnings=False) for e in seen])


def test_responses_canary_of_another_tenant_is_withheld(gw: Gateway, shared: ApisBackend) -> None:
    shared.mode("echo")
    responses_answer(gw, "Hello there.", stream=False, org="acme", instructions="You are helpful.")
    assert "kvfc-" in shared.received()[-1]["body"]["instructions"]  # injected where Responses keeps system text
    shared.mode("leak_canary")
    with pytest.raises(openai.APIStatusError) as caught:
        responses_answer(gw, "Hi.", stream=False, org="globex")
    assert caught.value.status_code == 502 and "kvfc-" not in str(caught.value.body)


def test_responses_class_raised_by_a_finding_routes_to_the_backend_it_allows(
        gw: Gateway, shared: ApisBackend, onprem: ApisBackend) -> None:
    shared.mode("echo")
    onprem.mode("echo")
    shared.clear()
    onprem.clear()
    with oai(gw) as client:
        raw = client.responses.with_raw_response.create(model="m", input="My SSN is 078-05-1120, file it.")
    assert raw.headers["x-kvfence-data-class"] == "restricted" and raw.headers["x-kvfence-backend"] == "onprem"
    assert not shared.received() and len(onprem.received()) == 1
    assert "078-05-1120" not in _sent_text(onprem) and "078-05-1120" in raw.parse().output_text


def test_responses_over_capacity_and_state_are_refused_before_they_leave(gw: Gateway, shared: ApisBackend) -> None:
    shared.clear()
    with oai(gw) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input="word " * 3000)
        assert caught.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError, match="max_output_tokens"):
            client.responses.create(model="m", input="hi", max_output_tokens=4000)
        with pytest.raises(openai.BadRequestError, match="previous_response_id"):
            client.responses.create(model="m", input="hi", previous_response_id="resp_1")
        with pytest.raises(openai.BadRequestError, match="store"):
            client.responses.create(model="m", input="hi", store=True)
        with pytest.raises(openai.BadRequestError, match="not_a_field"):
            client.responses.create(model="m", input="hi", extra_body={"not_a_field": 1})
    assert not shared.received()


def test_stored_responses_only_where_the_class_allows_and_the_backend_keeps_them(
        gw: Gateway, shared: ApisBackend, onprem: ApisBackend) -> None:
    shared.mode("echo")
    onprem.mode("echo")
    with oai(gw) as client:
        # restricted goes to onprem, which keeps responses unless told not to: the gateway tells it
        client.responses.create(model="m", input="hi", extra_headers={"X-Data-Class": "restricted"})
        assert onprem.received()[-1]["body"]["store"] is False
        shared.clear()
        raw = client.responses.with_raw_response.create(model="m", input="go on", previous_response_id="resp_9",
                                                        extra_headers={"X-Data-Class": "stateful"})
    assert raw.headers["x-kvfence-backend"] == "onprem" and not shared.received()  # the only one keeping state
    assert onprem.received()[-1]["body"]["previous_response_id"] == "resp_9"


# -- Messages ----------------------------------------------------------------------------------------

def messages_answer(gw: Gateway, text: str, *, stream: bool, org: str = "acme", **extra: Any) -> Message:
    args = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": text}], **extra}
    with ant(gw, org) as client:
        if not stream:
            answer = client.messages.create(**args)
            Message.model_validate(answer.model_dump(mode="json", warnings=False))
            return answer
        with client.messages.stream(**args) as events:
            seen = list(events)
            final = events.get_final_message()
    for event in seen:
        if event.type in ("message_start", "content_block_start", "content_block_delta", "content_block_stop",
                          "message_delta", "message_stop"):
            MESSAGE_EVENT.validate_python(event.model_dump(mode="json", exclude_unset=True, warnings=False))
    return final


def _blocks(answer: Message) -> dict[str, Any]:
    return {b.type: b for b in answer.content}


@pytest.mark.parametrize(("stream", "chunk"), [(False, 5), (True, 1), (True, 3), (True, 8)])
def test_messages_pseudonymised_out_restored_back(gw: Gateway, shared: ApisBackend, stream: bool, chunk: int) -> None:
    shared.mode("echo", chunk)
    answer = messages_answer(gw, TEXT, stream=stream, system="Be brief.")
    _left_as_placeholders(shared)
    assert shared.received()[-1]["path"] == "/v1/messages"  # natively: the backend speaks Anthropic's API
    blocks = _blocks(answer)
    assert blocks["text"].text == EXPECTED and blocks["thinking"].thinking == EXPECTED
    assert blocks["tool_use"].input == {"to": EXPECTED}


@pytest.mark.parametrize(("stream", "chunk"), [(False, 5), (True, 1), (True, 4)])
def test_messages_translated_to_chat_for_an_openai_only_backend(chat_only_gw: Gateway, shared: ApisBackend,
                                                                 stream: bool, chunk: int) -> None:
    shared.mode("echo", chunk)
    answer = messages_answer(chat_only_gw, TEXT, stream=stream, system="Be brief.")
    last = shared.received()[-1]
    assert last["path"] == "/v1/chat/completions" and last["body"]["messages"][0]["role"] == "system"
    _left_as_placeholders(shared)
    assert _blocks(answer)["text"].text == EXPECTED and answer.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field", ["text", "thinking", "input"])
def test_messages_leak_and_canary_are_withheld(gw: Gateway, shared: ApisBackend, stream: bool, field: str) -> None:
    shared.mode("echo")
    messages_answer(gw, SECRET, stream=False, org="acme")
    shared.mode("leak", 6, only=field)
    with pytest.raises(anthropic.APIStatusError) as caught:
        messages_answer(gw, "What is the capital of Portugal?", stream=stream, org="globex")
    assert "Tideline" not in str(caught.value.body)
    assert isinstance(caught.value.body, dict) and caught.value.body.get("type") == "error"
    shared.mode("echo")
    messages_answer(gw, "Hello there.", stream=False, org="acme", system="You are helpful.")
    assert "kvfc-" in json.dumps(shared.received()[-1]["body"]["system"])
    shared.mode("leak_canary", only=field)
    with pytest.raises(anthropic.APIStatusError):
        messages_answer(gw, "Hi.", stream=stream, org="globex")


def test_messages_errors_class_routing_and_caps(gw: Gateway, shared: ApisBackend, onprem: ApisBackend) -> None:
    shared.mode("echo")
    onprem.mode("echo")
    shared.clear()
    onprem.clear()
    with ant(gw) as client:
        raw = client.messages.with_raw_response.create(model="m", max_tokens=20, messages=[
            {"role": "user", "content": "My SSN is 078-05-1120, file it."}])
        assert raw.headers["x-kvfence-backend"] == "onprem" and not shared.received()
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "word " * 3000}])
        assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=gw.root, api_key="nope", max_retries=0).messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": TEXT}])
        assert counted.input_tokens > 10
    assert len(onprem.received()) == 1  # the over-capacity request and the count never left


# -- Embeddings --------------------------------------------------------------------------------------

def test_embeddings_pseudonymised_capped_and_refused(gw: Gateway, shared: ApisBackend) -> None:
    shared.clear()
    with oai(gw) as client:
        out = client.embeddings.create(model="m", input=[TEXT, "plain text"])
        assert [d.index for d in out.data] == [0, 1]
        _left_as_placeholders(shared)
        with pytest.raises(openai.BadRequestError, match="token ids"):
            client.embeddings.create(model="m", input=[[1, 2, 3]])
        with pytest.raises(openai.BadRequestError) as caught:
            client.embeddings.create(model="m", input=["short", "word " * 3000])
        assert caught.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError, match="may not send"):
            client.embeddings.create(model="m", input=TEXT, extra_headers={"X-Data-Class": "embed-block"})
        raw = client.embeddings.with_raw_response.create(model="m", input="SSN 078-05-1120 on file")
    assert raw.headers["x-kvfence-backend"] == "onprem"  # the class the finding raised allows only it
    assert len(shared.received()) == 1


@pytest.fixture(scope="module")
def bare_gw(shared: ApisBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """No protection hooks: named events go out as they came (only each stream's end is looked for)."""
    tmp = tmp_path_factory.mktemp("apis-bare-gw")
    policy = _policy(tmp, [{"name": "shared", "url": shared.url, "tier": "on_prem", "capacity": "policy",
                            "apis": ["openai", "anthropic"], "facts": FACTS}])
    policy["gateway"]["load_protection"] = False
    g = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    yield g
    g.stop()


def test_streams_without_hooks_are_relayed_whole(bare_gw: Gateway, shared: ApisBackend) -> None:
    shared.mode("echo", 2)
    answer = responses_answer(bare_gw, "hello there", stream=True)
    assert answer.output_text == "hello there"
    message = messages_answer(bare_gw, "hello there", stream=True)
    assert _blocks(message)["text"].text == "hello there"


@pytest.mark.parametrize("stream", [False, True])
def test_token_limits_count_the_new_apis(gw: Gateway, shared: ApisBackend, stream: bool) -> None:
    """Prompt counted at admission, max_tokens reserved, the backend's usage charged: the window fills."""
    shared.mode("echo")
    refused = None
    with ant(gw, "limited2" if stream else "limited") as client:  # a window of its own each
        for _ in range(8):
            try:
                if stream:
                    with client.messages.stream(model="m", max_tokens=250, messages=[
                            {"role": "user", "content": "hello"}]) as events:
                        events.get_final_message()
                else:
                    client.messages.create(model="m", max_tokens=250, messages=[{"role": "user", "content": "hello"}])
            except anthropic.RateLimitError as exc:
                refused = exc
                break
    assert refused is not None and refused.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


def test_every_api_is_in_the_audit_log_and_metrics_without_prompt_text(gw: Gateway, shared: ApisBackend) -> None:
    import sqlite3
    import time

    shared.mode("echo")
    marker = "zebrafish-orchid-7731"
    responses_answer(gw, f"{marker} one", stream=True)
    messages_answer(gw, f"{marker} two", stream=False)
    with oai(gw) as client:
        client.embeddings.create(model="m", input=f"{marker} three")
    audit = gw.config.parent / "audit.db"
    endpoints: set[str] = set()
    for _ in range(50):
        with sqlite3.connect(audit) as db:
            endpoints = {row[0] for row in db.execute("SELECT endpoint FROM gateway_decisions WHERE status = 200")}
        if {"responses", "messages", "embeddings"} <= endpoints:
            break
        time.sleep(0.1)
    assert {"responses", "messages", "embeddings"} <= endpoints
    assert not any(marker.encode() in f.read_bytes() for f in audit.parent.glob("audit.db*"))


@pytest.fixture(scope="module", params=[True, False], ids=["protected", "bare"])
def anthropic_only_gw(shared: ApisBackend, tmp_path_factory: pytest.TempPathFactory,
                      request: pytest.FixtureRequest) -> Iterator[Gateway]:
    """The backend declared as speaking only Anthropic's API: chat requests are translated to Messages."""
    tmp = tmp_path_factory.mktemp("apis-anthropic-gw")
    policy = _policy(tmp, [{"name": "anthropic-only", "url": shared.url, "tier": "on_prem", "capacity": "policy",
                            "apis": ["anthropic"], "facts": FACTS}])
    policy["gateway"]["load_protection"] = request.param
    g = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "s" * 32})
    g.protected = request.param  # type: ignore[attr-defined]
    yield g
    g.stop()


@pytest.mark.parametrize(("stream", "chunk"), [(False, 5), (True, 1), (True, 4)])
def test_chat_translated_to_messages_for_an_anthropic_only_backend(anthropic_only_gw: Gateway, shared: ApisBackend,
                                                                   stream: bool, chunk: int) -> None:
    shared.mode("echo", chunk)
    protected = anthropic_only_gw.protected  # type: ignore[attr-defined]
    expected = EXPECTED if protected else TEXT
    with oai(anthropic_only_gw) as client:
        messages: Any = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXT}]
        if not stream:
            answer = client.chat.completions.create(model="m", messages=messages, max_tokens=50)
            message = answer.choices[0].message
            content, calls = message.content, message.tool_calls or []
            arguments = calls[0].function.arguments if calls else ""  # type: ignore[union-attr]
            assert answer.choices[0].finish_reason == "tool_calls"
        else:
            parts, arguments_parts, finish = [], [], None
            for chunk_ in client.chat.completions.create(model="m", messages=messages, max_tokens=50, stream=True):
                for c in chunk_.choices:
                    parts.append(c.delta.content or "")
                    for call in c.delta.tool_calls or []:
                        arguments_parts.append(call.function.arguments or "" if call.function else "")
                    finish = c.finish_reason or finish
            content, arguments = "".join(parts), "".join(arguments_parts)
            assert finish == "tool_calls"
    last = shared.received()[-1]
    assert last["path"] == "/v1/messages" and last["body"]["system"].startswith("Be brief.")
    assert last["headers"]["anthropic-version"] == "2023-06-01"
    if protected:
        _left_as_placeholders(shared)
    assert content == expected and json.loads(arguments) == {"to": expected}


def test_chat_fields_that_do_not_translate_are_refused(anthropic_only_gw: Gateway, shared: ApisBackend) -> None:
    shared.clear()
    with oai(anthropic_only_gw) as client:
        for extra in ({"logprobs": True}, {"n": 2}, {"response_format": {"type": "json_object"}}, {"seed": 3}):
            with pytest.raises(openai.BadRequestError, match=next(iter(extra))):
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], **extra)
        with pytest.raises(openai.APIStatusError) as caught:  # completions do not translate: no backend can take it
            client.completions.create(model="m", prompt="hi")
        assert caught.value.status_code == 503
    assert not shared.received()
