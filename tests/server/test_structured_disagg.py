"""Structured outputs on a disaggregated server are a clear 400, never an unconstrained answer.

The first token is sampled on the prefill worker, which cannot run a request's grammar, so the
engine refuses the request before anything is allocated; the client must learn why.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest


@pytest.mark.parametrize("extra", [
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
    {"structured_outputs": {"choice": ["a", "b"]}},
])
def test_structured_outputs_are_refused_in_disaggregated_mode(disagg_server: str, extra: dict[str, object],
                                                               tmp_path: Path) -> None:
    r = httpx.post(disagg_server + "/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "structured outputs" in error["message"] and "disaggregated" in error["message"]
    assert error["param"] == next(iter(extra))  # the client's field, not the engine's
    plain = httpx.post(disagg_server + "/v1/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert plain.status_code == 200, plain.text
