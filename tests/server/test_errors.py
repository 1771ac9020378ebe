"""Every error the API answers: right status, OpenAI's error shape, and the server still answers."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kvfence.server.openai.serving import OpenAIServing
from tests.server.conftest import MAX_MODEL_LEN, RunningServer, engine_factory, serve


def _assert_error(response: httpx.Response, status: int, *, code: str | None = None, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in error["message"]
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return dict(error)


def _still_serving(server: RunningServer, who: str = "alice") -> None:
    r = httpx.post(server.base_url + "/v1/completions", headers=server.headers(who), timeout=60,
                   json={"prompt": "ok?", "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1


def _post(server: RunningServer, path: str, body: Any, who: str | None = "alice", **kw: Any) -> httpx.Response:
    headers = server.headers(who) if who else {}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(server.base_url + path, content=content, headers=headers, timeout=60, **kw)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_401_unknown_missing_or_malformed_key(server: RunningServer, path: str) -> None:
    body = {"prompt": "x", "messages": [{"role": "user", "content": "x"}]}
    for headers in ({}, {"Authorization": "Bearer kvf-not-a-key"}, {"Authorization": "Basic abc"},
                    {"Authorization": "Bearer " + server.keys["alice"] + "x"}):
        r = httpx.post(server.base_url + path, json=body, headers=headers)
        _assert_error(r, 401, code="invalid_api_key")
        assert r.headers["www-authenticate"] == "Bearer"
    _assert_error(httpx.get(server.base_url + "/v1/models"), 401)
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="kvf-wrong", max_retries=0) as client, \
            pytest.raises(openai.AuthenticationError):
        client.completions.create(model="x", prompt="x")
    _still_serving(server)


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b'{"prompt": "x", "max_tokens": 3', "invalid_json", None),
        (b'{"prompt": "\xff\xfe"}', "invalid_encoding", None),
        (b"[]", "invalid_json", None),
        ({"prompt": "x", "max_tokens": "3"}, None, "max_tokens"),
        ({"prompt": 42}, None, "prompt"),
        ({"prompt": "x", "temperature": 9}, None, "temperature"),
        ({"prompt": "x", "top_p": 0}, None, "top_p"),
        ({"prompt": "x", "max_tokens": 0}, None, "max_tokens"),
        ({"prompt": "x", "logprobs": 50}, None, "logprobs"),
        ({"prompt": "x", "n": 129}, None, "n"),
        ({"prompt": "x", "n": 0}, None, "n"),
        ({"prompt": "x", "n": 2, "best_of": 1}, None, "best_of"),
        ({"prompt": "x", "logit_bias": {"99999999": 1}}, None, "logit_bias"),
        ({"prompt": "x", "logit_bias": {"5": 101}}, None, "logit_bias"),
        ({"prompt": "x", "logit_bias": {"five": 1}}, None, "logit_bias"),
        ({"prompt": "x", "presence_penalty": 2.5}, None, "presence_penalty"),
        ({"prompt": "x", "frequency_penalty": -3}, None, "frequency_penalty"),
        ({"prompt": "x", "repetition_penalty": 0}, None, "repetition_penalty"),
        ({"prompt": "x", "min_p": 1.5}, None, "min_p"),
        ({"prompt": "x", "prompt_logprobs": 21}, None, "prompt_logprobs"),
        ({"prompt": "x", "prompt_logprobs": -1}, None, "prompt_logprobs"),
        ({"prompt": "x", "stream": True, "n": 1, "best_of": 2}, None, "best_of"),
        ({"prompt": "x", "min_tokens": 5, "max_tokens": 2}, None, "min_tokens"),
        ({"prompt": [999999]}, None, "prompt"),
    ],
)
def test_400_bad_completion_requests(server: RunningServer, body: Any, code: str | None, param: str | None) -> None:
    _assert_error(_post(server, "/v1/completions", body), 400, code=code, param=param)
    _still_serving(server)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_404_unknown_model_in_openai_shape(server: RunningServer, path: str) -> None:
    """OpenAI and vLLM answer an unknown model with 404 ``model_not_found`` (the openai client's NotFoundError)."""
    body = {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    _assert_error(_post(server, path, {**body, "model": "gpt-5"}), 404, code="model_not_found", param="model")
    _still_serving(server)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
        # function calling is refused, never silently answered with text
        ({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]}, "functions"),
        ({"messages": [{"role": "user", "content": "x"}], "function_call": {"name": "f"}}, "function_call"),
        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "tool_choice"),
        ({"messages": [{"role": "user", "content": "x"}],
          "tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ],
)
def test_400_bad_chat_requests(server: RunningServer, body: Any, param: str) -> None:
    _assert_error(_post(server, "/v1/chat/completions", body), 400, param=param)
    _still_serving(server)


def test_400_context_length_exceeded_before_anything_is_scheduled(server: RunningServer) -> None:
    """I3 at the edge: prompt + max_tokens > max_model_len is refused and nothing is allocated."""
    before = server.wait_idle()
    rejections = server.app.state.metrics.rejections.labels("context_length_exceeded")._value.get()
    long_prompt = "y" * (MAX_MODEL_LEN - 20)
    r = _post(server, "/v1/completions", {"prompt": long_prompt, "max_tokens": 100})
    err = _assert_error(r, 400, code="context_length_exceeded", param="prompt")
    assert str(MAX_MODEL_LEN) in err["message"]
    r = _post(server, "/v1/completions", {"prompt": "y" * (MAX_MODEL_LEN + 10)})
    _assert_error(r, 400, code="context_length_exceeded")
    r = _post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "z" * 2000}],
                                               "stream": True})
    _assert_error(r, 400, code="context_length_exceeded", param="messages")
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["bob"], max_retries=0) as client, \
            pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=server.app.state.serving.model.public_name, prompt=long_prompt,
                                  max_tokens=200)
    assert info.value.code == "context_length_exceeded"
    after = server.wait_idle()
    assert after.num_used_pages == before.num_used_pages
    assert server.app.state.serving.engine.num_pending == 0
    assert server.app.state.metrics.rejections.labels("context_length_exceeded")._value.get() == rejections + 4
    _still_serving(server)


def test_per_key_prompt_limit(server: RunningServer) -> None:
    r = _post(server, "/v1/completions", {"prompt": "w" * 100, "max_tokens": 1}, who="limited")
    _assert_error(r, 400, code="context_length_exceeded", param="prompt")
    _still_serving(server, "limited")


def test_429_when_a_key_is_at_its_concurrency_limit(server: RunningServer) -> None:
    body = {"prompt": "long", "max_tokens": 900, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.base_url + "/v1/completions", json=body, headers=server.headers("limited"),
                      timeout=60) as first:
        assert first.status_code == 200
        lines = first.iter_lines()  # keep a reference: a collected iterator closes the stream
        next(lines)
        r = _post(server, "/v1/completions", {"prompt": "x", "max_tokens": 1}, who="limited")
        _assert_error(r, 429, code="concurrency_limit_exceeded")
        assert r.headers.get("retry-after")
        _still_serving(server, "alice")  # other keys are not affected
    server.wait_idle()
    _still_serving(server, "limited")


def test_404_405_413(server: RunningServer) -> None:
    _assert_error(httpx.get(server.base_url + "/v2/nothing"), 404)
    _assert_error(httpx.get(server.base_url + "/v1/completions", headers=server.headers("alice")), 405)
    huge = b'{"prompt": "' + b"a" * (17 * 1024 * 1024) + b'"}'
    _assert_error(_post(server, "/v1/completions", huge), 413, code="request_too_large")
    _still_serving(server)


def test_429_when_the_queue_is_full(tmp_path: Path) -> None:
    with serve(tmp_path, factory=engine_factory(max_num_seqs=1), max_queue_len=0) as small:
        body = {"prompt": "hold", "max_tokens": 900, "temperature": 0, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", small.base_url + "/v1/completions", json=body, headers=small.headers("bob"),
                          timeout=60) as first:
            assert first.status_code == 200
            lines = first.iter_lines()
            next(lines)
            r = _post(small, "/v1/completions", {"prompt": "x", "max_tokens": 1}, who="carol")
            _assert_error(r, 429, code="queue_full")
        small.wait_idle()
        _still_serving(small, "carol")
        metrics = httpx.get(small.base_url + "/metrics").text
        assert 'kvfence_rejections_total{reason="queue_full"} 1.0' in metrics


def test_503_while_the_model_loads(tmp_path: Path) -> None:
    release = threading.Event()
    build = engine_factory()

    def slow_factory() -> Any:
        release.wait(60)
        return build()

    with serve(tmp_path, factory=slow_factory, wait_ready=False) as loading:
        serving: OpenAIServing = loading.app.state.serving
        assert serving.engine is None
        _assert_error(httpx.get(loading.base_url + "/health"), 503, code="model_loading")
        r = _post(loading, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
        _assert_error(r, 503, code="model_loading")
        assert r.headers.get("retry-after")
        _assert_error(httpx.get(loading.base_url + "/v1/capacity"), 503)
        release.set()
        for _ in range(600):
            if httpx.get(loading.base_url + "/health").status_code == 200:
                break
            threading.Event().wait(0.1)
        _still_serving(loading)


def test_load_failure_is_reported_not_served(tmp_path: Path) -> None:
    from kvfence.errors import CapacityError
    from kvfence.server.app import create_app
    from kvfence.server.config import ServerConfig

    failures: list[BaseException] = []
    done = threading.Event()

    def failing() -> Any:
        raise CapacityError("max_model_len=4096 does not fit the KV pool of 1024 tokens")

    def on_fatal(exc: BaseException) -> None:
        failures.append(exc)
        done.set()

    app = create_app(ServerConfig(), failing, secret=b"s" * 32, keyring=None, on_fatal=on_fatal)
    from starlette.testclient import TestClient

    with TestClient(app) as client:
        assert done.wait(10)
        assert client.get("/health").status_code == 503
    assert isinstance(failures[0], CapacityError)
