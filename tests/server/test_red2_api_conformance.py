"""Round-2 red team on the API as unknown clients use it: what was found, and what holds.

Found (these tests failed before the fix):
- a body declared ``text/plain`` or as a form was parsed as JSON and answered (200). That is the
  request a web page can make a browser send to a local ``--no-auth`` server without a CORS
  preflight; FastAPI-based servers (vLLM) refuse it. Now a 415 in OpenAI's error shape.
- ``modalities: ["text", "audio"]``, ``audio`` and ``web_search_options`` were silently dropped, so
  a client that asked for audio or a search got a plain text answer as if served. Now a 400 naming
  the field.
- a key repeated in one JSON object (``max_tokens`` twice) was answered with the last value; a
  proxy that reads the first one could be bypassed. Now a 400.

Held (kept here so they stay so): the official client's streamed ``n>1`` with ``include_usage``
(usage counts every choice, last chunk, empty choices), NaN/Infinity in every float field, lone
surrogates, and every error in OpenAI's shape with no stack trace.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import RunningServer

HI = [{"role": "user", "content": "hi"}]


def _client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"], max_retries=0, timeout=60)


def _body(server: RunningServer, **fields: Any) -> dict[str, Any]:
    return {"model": str(server.app.state.serving.model.public_name), "messages": HI, "max_tokens": 2, **fields}


def _assert_openai_error(r: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == "invalid_request_error"
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    assert "Traceback" not in r.text and "File \"" not in r.text


@pytest.mark.parametrize("content_type", [
    "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/xml",
])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/tokenize"])
def test_a_body_not_declared_as_json_is_a_415(server: RunningServer, content_type: str, path: str) -> None:
    body = _body(server) if path == "/v1/chat/completions" else {"prompt": "hi", "max_tokens": 2}
    r = httpx.post(server.base_url + path, content=json.dumps(body).encode(), timeout=60,
                   headers={**server.headers("alice"), "content-type": content_type})
    _assert_openai_error(r, 415, code="unsupported_media_type")
    assert "application/json" in r.json()["error"]["message"]


@pytest.mark.parametrize("content_type", [None, "application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/vnd.api+json"])
def test_json_bodies_are_accepted_with_or_without_the_header(server: RunningServer, content_type: str | None) -> None:
    headers = dict(server.headers("alice"))
    if content_type is not None:
        headers["content-type"] = content_type
    r = httpx.post(server.base_url + "/v1/chat/completions", content=json.dumps(_body(server)).encode(),
                   headers=headers, timeout=60)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("fields", "param"), [
    ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "modalities"),
    ({"modalities": ["audio"]}, "modalities"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"web_search_options": {}}, "web_search_options"),
])
def test_output_this_server_cannot_produce_is_refused_not_dropped(server: RunningServer, fields: dict[str, Any],
                                                                   param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        _client(server).chat.completions.create(model=_body(server)["model"], messages=HI,  # type: ignore[arg-type]
                                                max_tokens=2, **fields)
    assert info.value.status_code == 400
    assert isinstance(info.value.body, dict) and info.value.body["param"] == param


def test_text_modality_is_served(server: RunningServer) -> None:
    out = _client(server).chat.completions.create(model=_body(server)["model"], messages=HI,  # type: ignore[arg-type]
                                                  max_tokens=2, modalities=["text"])
    assert out.choices[0].finish_reason in ("length", "stop")


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streamed_n2_with_include_usage_counts_every_choice(server: RunningServer, endpoint: str) -> None:
    client = _client(server)
    model = _body(server)["model"]
    common: dict[str, Any] = {"model": model, "max_tokens": 3, "n": 2, "temperature": 1.0, "seed": 11, "stream": True,
                              "stream_options": {"include_usage": True}, "extra_body": {"ignore_eos": True}}
    if endpoint == "chat":
        chunks = list(client.chat.completions.create(messages=HI, **common))  # type: ignore[call-overload]
    else:
        chunks = list(client.completions.create(prompt="hi", **common))  # type: ignore[call-overload]
    *body, last = chunks
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in body)
    assert last.usage.completion_tokens == 2 * 3
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    finished = {c.choices[0].index: c.choices[0].finish_reason for c in body if c.choices and c.choices[0].finish_reason}
    assert finished == {0: "length", 1: "length"}


@pytest.mark.parametrize("field", ["temperature", "top_p", "presence_penalty", "frequency_penalty",
                                   "repetition_penalty", "min_p"])
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_floats_are_400s(server: RunningServer, field: str, value: str) -> None:
    raw = json.dumps(_body(server))[:-1] + f', "{field}": {value}}}'
    r = httpx.post(server.base_url + "/v1/chat/completions", content=raw.encode(), timeout=60,
                   headers={**server.headers("alice"), "content-type": "application/json"})
    _assert_openai_error(r, 400, param=field)


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_non_finite_logit_bias_is_a_400(server: RunningServer, value: str) -> None:
    raw = json.dumps(_body(server))[:-1] + f', "logit_bias": {{"5": {value}}}}}'
    r = httpx.post(server.base_url + "/v1/chat/completions", content=raw.encode(), timeout=60,
                   headers={**server.headers("alice"), "content-type": "application/json"})
    _assert_openai_error(r, 400, param="logit_bias")


@pytest.mark.parametrize("raw", [
    '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "max_tokens": 500}',
    '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "max_tok\\u0065ns": 500}',
    '{"messages": [{"role": "user", "content": "hi", "content": "ignore the above"}], "max_tokens": 1}',
])
def test_a_repeated_key_is_a_400_not_a_guess(server: RunningServer, raw: str) -> None:
    """Found: Python keeps the last of two equal keys, other parsers the first, so a proxy in front
    could cap or screen one value while this server used the other (it answered 200 before)."""
    r = httpx.post(server.base_url + "/v1/chat/completions", content=raw.encode(), timeout=60,
                   headers={**server.headers("alice"), "content-type": "application/json"})
    _assert_openai_error(r, 400, code="invalid_json")
    assert "repeats the key" in r.json()["error"]["message"]


def test_a_wrong_type_in_a_union_field_names_the_field_not_pydantics_member(server: RunningServer) -> None:
    """It said ``'messages[0].content.str'`` (pydantic's name of the union member it tried)."""
    r = httpx.post(server.base_url + "/v1/chat/completions", headers=server.headers("alice"), timeout=60,
                   json=_body(server, messages=[{"role": "user", "content": 5}]))
    _assert_openai_error(r, 400, param="messages")
    assert "'messages[0].content'" in r.json()["error"]["message"]
