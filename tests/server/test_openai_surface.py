"""What a client used to vLLM / OpenAI sends, field by field: accepted, honoured, or a clear 400.

Unknown fields are ignored (as vLLM does); fields that would change the answer but are not
implemented are a 400 naming the field. These tests use the official client where it can send the
field, raw httpx where a shape must be checked byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import RunningServer

GREEDY: dict[str, Any] = {"temperature": 0, "extra_body": {"ignore_eos": True}}
HI = [{"role": "user", "content": "hi"}]


def _client(server: RunningServer, who: str = "alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys[who], max_retries=0, timeout=60)


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def _post(server: RunningServer, path: str, body: Any) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, headers=server.headers("alice"), timeout=60)


def _events(text: str) -> list[Any]:
    """The JSON payloads of an SSE body; ``[DONE]`` as the string."""
    out: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_max_completion_tokens_on_both_endpoints(server: RunningServer) -> None:
    with _client(server) as client:
        chat = client.chat.completions.create(model=_model(server), messages=HI,  # type: ignore[arg-type]
                                              max_completion_tokens=3, **GREEDY)
    assert chat.usage is not None and chat.usage.completion_tokens == 3
    r = _post(server, "/v1/completions", {"prompt": "hi", "max_completion_tokens": 5, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5


def test_accepted_fields_that_change_nothing(server: RunningServer) -> None:
    """user, metadata, store, parallel_tool_calls, n=1, response_format text, an empty tools list,
    system and developer roles, content as text parts, and unknown fields."""
    body = {
        "model": _model(server), "max_tokens": 2, "temperature": 0, "n": 1, "user": "u-1", "store": False,
        "metadata": {"team": "x"}, "parallel_tool_calls": False, "response_format": {"type": "text"},
        "tools": [], "tool_choice": "none", "some_future_field": {"a": 1},
        "messages": [{"role": "system", "content": "S"}, {"role": "developer", "content": [{"type": "text", "text": "D"}]},
                     {"role": "user", "content": [{"type": "text", "text": "he"}, {"type": "text", "text": "llo"}]}],
    }
    r = _post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    same = _post(server, "/v1/chat/completions", {"model": _model(server), "max_tokens": 2, "temperature": 0,
                                                  "messages": [{"role": "system", "content": "S"},
                                                               {"role": "developer", "content": "D"},
                                                               {"role": "user", "content": "hello"}]})
    assert r.json()["choices"][0]["message"] == same.json()["choices"][0]["message"]
    assert r.json()["usage"]["prompt_tokens"] == same.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize(("body", "param"), [
    ({"n": 0}, "n"),
    ({"n": 129}, "n"),
    ({"best_of": 3}, "best_of"),
    ({"logit_bias": {"-4": 1}}, "logit_bias"),
    ({"response_format": {"type": "structural_tag"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ({"max_tokens": "5"}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"stop": 7}, "stop"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
])
def test_clear_400s(server: RunningServer, body: dict[str, Any], param: str) -> None:
    r = _post(server, "/v1/chat/completions", {"model": _model(server), "messages": HI, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def _fresh_stop_index(text: str) -> int:
    """A position from 3 on whose character has not appeared before it: a stop string that cuts there."""
    cut = next((i for i in range(3, len(text)) if text[i] not in text[:i] and text[i] != "\ufffd"), None)
    if cut is None:
        pytest.skip("the random model's text has no fresh character to stop on")
    return cut


def test_stop_as_string_and_list_streamed_and_not(server: RunningServer) -> None:
    model = _model(server)
    with _client(server) as client:
        base = client.completions.create(model=model, prompt="stop strings", max_tokens=24, **GREEDY).choices[0].text
        cut = _fresh_stop_index(base)
        for stop in (base[cut], [base[cut], "\x00never\x00"]):
            full = client.completions.create(model=model, prompt="stop strings", max_tokens=24, stop=stop, **GREEDY)
            streamed = "".join(c.choices[0].text for c in client.completions.create(
                model=model, prompt="stop strings", max_tokens=24, stop=stop, stream=True, **GREEDY))
            assert full.choices[0].finish_reason == "stop"
            assert full.choices[0].text == base[:cut] == streamed


def test_vllm_text_options_stop_string_and_special_tokens(server: RunningServer) -> None:
    """include_stop_str_in_output and skip_special_tokens (vLLM extras) change the text, streamed or not."""
    model = _model(server)
    with _client(server) as client:
        base = client.completions.create(model=model, prompt="stop strings", max_tokens=24, **GREEDY).choices[0].text
        cut = _fresh_stop_index(base)
        args: dict[str, Any] = {"model": model, "prompt": "stop strings", "max_tokens": 24, "stop": [base[cut]],
                                "temperature": 0, "extra_body": {"ignore_eos": True, "include_stop_str_in_output": True}}
        full = client.completions.create(**args).choices[0]
        streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **args))
        assert full.finish_reason == "stop" and full.text == base[: cut + 1] == streamed
        header = _post(server, "/tokenize", {"model": model, "prompt": "<|start_header_id|>",
                                             "add_special_tokens": False}).json()["tokens"]
        assert len(header) == 1
        forced: dict[str, Any] = {"model": model, "prompt": "hi", "max_tokens": 2, "temperature": 0,
                                  "logit_bias": {str(header[0]): 100}}
        kept = client.completions.create(**forced, extra_body={"skip_special_tokens": False}).choices[0].text
        skipped = client.completions.create(**forced).choices[0].text
        kept_streamed = "".join(c.choices[0].text for c in client.completions.create(
            stream=True, **forced, extra_body={"skip_special_tokens": False}))
    assert kept == kept_streamed == "<|start_header_id|>" * 2 and skipped == ""


def test_continue_final_message_and_template_options(server: RunningServer) -> None:
    """vLLM's chat extras: continue the last assistant message; chat_template_kwargs reach the template;
    a request-supplied template or documents are refused, never ignored."""
    tok = server.app.state.serving.model.tokenizer
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon"}]
    body = {"model": _model(server), "messages": messages, "max_tokens": 2, "add_generation_prompt": False,
            "continue_final_message": True}
    r = _post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    expected = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=False, continue_final_message=True),
                          add_special_tokens=False)
    closed = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=False), add_special_tokens=False)
    assert r.json()["usage"]["prompt_tokens"] == len(expected) < len(closed)
    kwargs = _post(server, "/v1/chat/completions", {**body, "chat_template_kwargs": {"enable_thinking": False}})
    assert kwargs.status_code == 200, kwargs.text
    for extra, param in (({"add_generation_prompt": True}, "continue_final_message"),
                         ({"chat_template": "{{ messages }}"}, "chat_template"),
                         ({"documents": [{"text": "d"}]}, "documents"),
                         ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs")):
        bad = _post(server, "/v1/chat/completions", {**body, **extra})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param, bad.text


def test_seed_reproduces_sampling_streamed_or_not(server: RunningServer) -> None:
    args: dict[str, Any] = {"model": _model(server), "messages": HI, "max_tokens": 12, "temperature": 1.0,
                            "seed": 1234, "extra_body": {"ignore_eos": True}}
    with _client(server) as client:
        a = client.chat.completions.create(**args).choices[0].message.content
        b = client.chat.completions.create(**args).choices[0].message.content
        s = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **args)
                    if c.choices)
        other = client.chat.completions.create(**{**args, "seed": 99}).choices[0].message.content
    assert a == b == s
    assert other != a


def test_include_usage_chunk_is_last_with_empty_choices(server: RunningServer) -> None:
    for path, body in (("/v1/chat/completions", {"messages": HI}), ("/v1/completions", {"prompt": "hi"})):
        r = _post(server, path, {**body, "max_tokens": 4, "stream": True, "ignore_eos": True,
                                 "stream_options": {"include_usage": True}})
        events = _events(r.text)
        assert events[-1] == "[DONE]"
        usage_chunk = events[-2]
        assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 4
        assert all("usage" not in e for e in events[:-2])


def test_continuous_usage_stats(server: RunningServer) -> None:
    r = _post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 4, "stream": True, "ignore_eos": True,
                                          "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    chunks = [e for e in _events(r.text) if e != "[DONE]" and e["choices"]]
    assert chunks and all("usage" in c for c in chunks)
    completion = [c["usage"]["completion_tokens"] for c in chunks]
    assert completion == sorted(completion) and completion[-1] == 4
    # As in vLLM, continuous_usage_stats needs include_usage.
    r = _post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stream": True, "ignore_eos": True,
                                          "stream_options": {"continuous_usage_stats": True}})
    assert all("usage" not in e for e in _events(r.text) if e != "[DONE]")


def test_logprob_shapes(server: RunningServer) -> None:
    chat = _post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 3, "temperature": 0,
                                                  "ignore_eos": True, "logprobs": True, "top_logprobs": 2}).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 3
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert isinstance(entry["bytes"], list) and all(0 <= b < 256 for b in entry["bytes"])
        assert len(entry["top_logprobs"]) == 2
        assert all(set(t) == {"token", "logprob", "bytes"} for t in entry["top_logprobs"])
    # The built-in byte tokenizer: a token's bytes are its own byte, even when it is half a character,
    # so the bytes of the (non-special) tokens spell the answer.
    own = b"".join(bytes(e["bytes"]) for e in content if not e["token"].startswith("<|"))
    assert own.decode("utf-8", errors="replace") == chat["choices"][0]["message"]["content"]
    assert all(len(e["bytes"]) == 1 for e in content if e["token"] == "\ufffd")

    body = {"prompt": "hi", "max_tokens": 6, "temperature": 0, "ignore_eos": True, "logprobs": 2}
    full = _post(server, "/v1/completions", body).json()["choices"][0]["logprobs"]
    assert set(full) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert len(full["tokens"]) == len(full["token_logprobs"]) == len(full["top_logprobs"]) == 6
    expected, at = [], 0
    for token in full["tokens"]:
        expected.append(at)
        at += len(token)
    assert full["text_offset"] == expected
    streamed = [e["choices"][0]["logprobs"] for e in _events(_post(server, "/v1/completions",
                                                                      {**body, "stream": True}).text)
                if e != "[DONE]" and e["choices"][0]["logprobs"]]
    assert [t for s in streamed for t in s["tokens"]] == full["tokens"]
    assert [o for s in streamed for o in s["text_offset"]] == full["text_offset"]


def test_completion_prompt_shapes(server: RunningServer) -> None:
    tok = server.app.state.serving.model.tokenizer
    ids = tok.encode("token ids")
    as_text = _post(server, "/v1/completions", {"prompt": "token ids", "max_tokens": 4, "temperature": 0,
                                                "ignore_eos": True}).json()
    as_ids = _post(server, "/v1/completions", {"prompt": ids, "max_tokens": 4, "temperature": 0,
                                               "ignore_eos": True}).json()
    assert as_ids["choices"][0]["text"] == as_text["choices"][0]["text"]
    assert as_ids["usage"]["prompt_tokens"] == len(ids)
    many = _post(server, "/v1/completions", {"prompt": ["token ids", "other"], "max_tokens": 4, "temperature": 0,
                                             "ignore_eos": True}).json()
    assert [c["index"] for c in many["choices"]] == [0, 1]
    assert many["choices"][0]["text"] == as_text["choices"][0]["text"]
    lists = _post(server, "/v1/completions", {"prompt": [ids, ids[:3]], "max_tokens": 2}).json()
    assert len(lists["choices"]) == 2


def test_models_and_health_shapes(server: RunningServer) -> None:
    models = httpx.get(server.base_url + "/v1/models", headers=server.headers("alice")).json()
    assert models["object"] == "list" and models["data"]
    card = models["data"][0]
    assert {"id", "object", "created", "owned_by"} <= set(card) and card["object"] == "model"
    assert isinstance(card["created"], int)
    # vLLM's additions: the model served, its context, no parent (no adapters), a permission object
    model = server.app.state.serving.model
    assert card["root"] == model.name and card["parent"] is None and card["owned_by"] == "kvfence"
    assert card["max_model_len"] == model.capacity.max_model_len
    assert card["permission"][0]["object"] == "model_permission" and card["permission"][0]["allow_logprobs"]
    one = httpx.get(server.base_url + f"/v1/models/{card['id']}", headers=server.headers("alice")).json()
    assert one == card
    assert httpx.get(server.base_url + "/health").status_code == 200


def test_plumbing_errors_have_the_openai_shape(server: RunningServer) -> None:
    cases = [
        (httpx.post(server.base_url + "/v1/chat/completions", content=b"{not json",
                    headers=server.headers("alice")), 400),
        (httpx.get(server.base_url + "/v1/chat/completions", headers=server.headers("alice")), 405),
        (httpx.get(server.base_url + "/v1/no-such-path", headers=server.headers("alice")), 404),
        (httpx.get(server.base_url + "/no-such-path"), 404),
        (httpx.post(server.base_url + "/v1/chat/completions", json={"messages": HI}), 401),
        (httpx.post(server.base_url + "/v1/chat/completions", json={"messages": HI},
                    headers={"Authorization": "Bearer sk-wrong"}), 401),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_a_failure_mid_stream_ends_with_an_error_event(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug while formatting a chunk must not look like a short, successful answer."""
    import kvfence.server.openai.serving as serving_module

    calls = {"n": 0}
    real = serving_module.chat_chunk

    def failing_chunk(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("test: formatting bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(serving_module, "chat_chunk", failing_chunk)
    r = _post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 8, "stream": True, "ignore_eos": True})
    events = _events(r.text)
    assert "[DONE]" not in events
    assert events[-1]["error"]["code"] == "internal_error" and "formatting bug" not in r.text
    with _client(server) as client, pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model=_model(server), messages=HI,  # type: ignore[arg-type]
                                                max_tokens=8, stream=True, extra_body={"ignore_eos": True}):
            calls["n"] = 2  # the next chunk fails
    monkeypatch.undo()
    server.wait_idle()
    assert _post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 1}).status_code == 200


def test_key_headers_and_version(server: RunningServer) -> None:
    """x-api-key / api-key work like a Bearer key; sent next to an Authorization header, neither is chosen."""
    body = {"messages": HI, "max_tokens": 1}
    key = server.keys["alice"]
    for headers, status in (({"x-api-key": key}, 200), ({"api-key": key}, 200), ({"x-api-key": "kvf-wrong"}, 401),
                            ({"Authorization": "Basic abc", "x-api-key": key}, 400)):  # two credentials: refused
        r = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=60)
        assert r.status_code == status, (headers, r.text)
    version = httpx.get(server.base_url + "/version").json()  # public, like vLLM's
    assert version["engine"] == "kvfence" and version["version"]


def test_tokenize_and_detokenize(server: RunningServer) -> None:
    """vLLM's /tokenize and /detokenize: the same ids the generation endpoints count, key required."""
    tok = server.app.state.serving.model.tokenizer
    r = _post(server, "/tokenize", {"model": _model(server), "prompt": "Grüße 🎉"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == tok.encode("Grüße 🎉") and body["count"] == len(body["tokens"])
    assert body["max_model_len"] == server.app.state.serving.model.capacity.max_model_len
    bare = _post(server, "/tokenize", {"prompt": "Grüße 🎉", "add_special_tokens": False}).json()
    assert bare["tokens"] == tok.encode("Grüße 🎉", add_special_tokens=False)
    chat = _post(server, "/tokenize", {"messages": HI}).json()
    answer = _post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 1}).json()
    assert chat["count"] == answer["usage"]["prompt_tokens"]
    back = _post(server, "/detokenize", {"tokens": bare["tokens"]}).json()
    assert back == {"prompt": "Grüße 🎉"}
    assert body["token_strs"] is None
    strs = _post(server, "/tokenize", {"prompt": "Grüße 🎉", "add_special_tokens": False,
                                       "return_token_strs": True}).json()["token_strs"]
    assert strs == [tok.backend.id_to_token(t) for t in bare["tokens"]]  # the pieces, as vLLM's
    for path, body in (("/tokenize", {}), ("/tokenize", {"prompt": "x", "messages": HI}),
                       ("/detokenize", {"tokens": []}), ("/detokenize", {"tokens": [10**9]})):
        assert _post(server, path, body).status_code == 400, (path, body)
    assert _post(server, "/tokenize", {"prompt": "x", "model": "nope"}).status_code == 404  # as vLLM
    assert httpx.post(server.base_url + "/tokenize", json={"prompt": "x"}).status_code == 401
