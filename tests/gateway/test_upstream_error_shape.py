"""Upstream error bodies reach the caller in OpenAI's shape, whatever the backend wrote."""

from __future__ import annotations

import json

import pytest

from kvfence.openai_wire import normalise_error_body


def test_openai_shaped_errors_pass_unchanged() -> None:
    raw = b'{"error": {"message": "rate limited", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}'
    assert normalise_error_body(raw, 429, "hosted") is None


@pytest.mark.parametrize(("raw", "message", "code"), [
    # vLLM / SGLang
    (b'{"object": "error", "message": "max_tokens is too large", "type": "BadRequestError", "param": null, '
     b'"code": 400}', "max_tokens is too large", 400),
    (b'{"detail": "Not Found"}', "Not Found", None),  # a FastAPI default
    (b'{"error": "model overloaded"}', "model overloaded", None),
    (b'{"detail": [{"loc": ["body", "messages"], "msg": "field required"}]}', "field required", None),
])
def test_other_json_shapes_are_wrapped_keeping_their_message(raw: bytes, message: str, code: object) -> None:
    out = normalise_error_body(raw, 400, "vllm-a")
    assert out is not None
    error = json.loads(out)["error"]
    assert message in error["message"] and error["code"] == code
    assert set(error) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("raw", [b"<html><body><h1>502 Bad Gateway</h1></body></html>", b"", b"[1, 2]",
                                 b"\xff\xfe not utf-8", b'"just a string"'])
def test_non_json_errors_become_an_openai_error_naming_backend_and_status(raw: bytes) -> None:
    out = normalise_error_body(raw, 502, "hosted-shared")
    assert out is not None
    error = json.loads(out)["error"]
    assert error["message"] == ("backend hosted-shared answered HTTP 502 without an error message in "
                                "OpenAI's format")
    assert "html" not in out.decode().lower()
