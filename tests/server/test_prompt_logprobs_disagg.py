"""Prompt log-probabilities on a disaggregated server are a clear 400, never an answer without them.

The prompt is computed on the prefill worker, whose handoff carries KV pages and the first token,
not a score per prompt position; the engine refuses before anything is allocated.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/completions", {"prompt": "hi", "prompt_logprobs": 0}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "hi", "echo": True, "logprobs": 1, "max_tokens": 1}, "echo"),
    ("/v1/completions", {"prompt": "hi", "echo": True, "logprobs": 0, "max_tokens": 0}, "echo"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 2},
     "prompt_logprobs"),
])
def test_prompt_logprobs_are_refused_in_disaggregated_mode(disagg_server: str, path: str, body: dict[str, Any],
                                                           param: str) -> None:
    r = httpx.post(disagg_server + path, timeout=60, json={"max_tokens": 2, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "disaggregated" in error["message"] and error["param"] == param
    plain = httpx.post(disagg_server + "/v1/completions", timeout=60, json={"prompt": "hi", "max_tokens": 2})
    assert plain.status_code == 200, plain.text


def test_echo_with_max_tokens_zero_still_answers_the_prompt_in_disaggregated_mode(disagg_server: str) -> None:
    """The disaggregated engine always samples a first token (it refuses max_tokens=0): the server
    sends it max_tokens 1 and drops the token, so the answer is the prompt alone, as elsewhere."""
    r = httpx.post(disagg_server + "/v1/completions", timeout=60,
                   json={"prompt": "hello there", "echo": True, "max_tokens": 0})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == "hello there" and choice["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == 0
