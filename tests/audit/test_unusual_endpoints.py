"""``kvfence audit`` against endpoints shaped the way real deployments are, not the way tests are.

A vulnerable backend (a prefix cache shared by every organisation, over-length prompts truncated
and answered 200 with another organisation's earlier prompt) behind what gateways and hosted APIs
add: a path prefix before ``/v1``, no ``/v1/models`` (404 with a plain-text body), a model name that
must be given, intermittent HTTP 500s with non-JSON bodies, and a slow first token. Every check must
still find what is there, the run must exit 1, and nothing may print a stack trace.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

from kvfence.audit.target import normalise_endpoint
from tests.audit.conftest import AuditRun, check_result
from tests.audit.simbackend import SimConfig, build_app, serve_app

PREFIX = "/api/openai"
MODEL = "acme/sim-model"


@contextmanager
def hostile_backend(config: SimConfig, *, fail_every: int = 0) -> Iterator[str]:
    """The simulated backend under ``PREFIX``, with the quirks above; yields the URL up to the prefix."""
    inner = build_app(config)
    calls = {"n": 0}

    async def quirks(scope: Any, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            return await inner(scope, receive, send)
        path = scope["path"]
        response: Response | None = None
        if path.endswith("/v1/models"):
            response = PlainTextResponse("Not Found", status_code=404)
        elif path.endswith("/completions"):
            request = Request(scope, receive)
            body = await request.body()
            if json.loads(body).get("model") != MODEL:
                response = JSONResponse({"error": {"message": "unknown model", "type": "invalid_request_error",
                                                   "code": "model_not_found"}}, status_code=404)
            else:
                calls["n"] += 1
                if fail_every and calls["n"] % fail_every == 0:
                    response = PlainTextResponse("upstream connect error or disconnect/reset before headers",
                                                 status_code=500)
            if response is None:
                replayed = False

                async def replay() -> Any:  # the body once, then the client's own events (disconnect)
                    nonlocal replayed
                    if replayed:
                        return await receive()
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await inner(scope, replay, send)
        if response is None:
            return await inner(scope, receive, send)
        await response(scope, receive, send)

    with serve_app(Starlette(routes=[Mount(PREFIX, app=quirks)]), "the hostile backend") as url:
        yield url + PREFIX


VULNERABLE = SimConfig(sharing="global", over_length="leak", max_model_len=2048, base_s=0.02)
# Sequential looks: the levels stop as soon as the sharing is seen, long before --samples.
FAST = ["--seed", "7", "--samples", "60", "--prompt-tokens", "600"]


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/chat/completions", "/v1/models/"])
def test_the_endpoint_may_be_given_with_or_without_v1(suffix: str) -> None:
    base = "https://llm.example.com/api/openai"
    assert normalise_endpoint(base + suffix) == base
    assert normalise_endpoint("http://127.0.0.1:8000" + suffix) == "http://127.0.0.1:8000"


def test_every_check_finds_the_vulnerability_behind_a_prefix_and_intermittent_500s(run_audit: AuditRun, tmp_path: Path) -> None:
    with hostile_backend(VULNERABLE, fail_every=20) as url:
        result, data = run_audit("all", url + "/v1/", "--model", MODEL, "--max-context", "2048", *FAST)
    assert "Traceback" not in result.output
    assert result.exit_code == 1, result.output
    verdicts = {c["check"]: c["verdict"] for c in data["checks"]}
    # engine: nothing identifies it (inconclusive); the three measured checks each find their fault
    assert verdicts == {"engine": "inconclusive", "admission": "finding", "leak": "finding",
                        "cache-sharing": "finding"}, verdicts
    levels = check_result(data, "cache-sharing")["measurements"]["levels"]
    assert levels["cross-org"]["shares_cache"]
    # the 500s were counted as failed trials, not taken as timing samples
    assert sum(level["failed_trials"] for level in levels.values()) >= 1
    assert data["exit_code"] == 1
    # the endpoint as normalised: the path prefix kept, "/v1" and a trailing slash dropped
    assert {(c["endpoint"], c["model"]) for c in data["checks"]} == {(url, MODEL)}
    report = (tmp_path / "report" / "report.md").read_text()
    assert "finding" in report.lower()
    assert (tmp_path / "report" / "report.html").exists()
    for check in ("engine", "admission", "leak", "cache-sharing"):
        json.loads((tmp_path / "report" / f"{check}.json").read_text())


def test_without_a_model_name_the_run_says_to_pass_one(run_audit: AuditRun) -> None:
    with hostile_backend(VULNERABLE) as url:
        result, data = run_audit("admission", url, "--max-context", "2048")
    assert result.exit_code == 2, result.output
    reason = check_result(data, "admission")["summary"] if data else result.output
    assert "--model" in reason and "404" in reason, reason
    assert "Traceback" not in result.output


@contextmanager
def placeholder_backend(over_length: str) -> Iterator[str]:
    """Answers prompts that fit; answers an over-length prompt with HTTP 200 and nothing readable:
    ``empty`` (an empty body, or a stream of just ``[DONE]``), ``html`` (a proxy's page), ``null``
    (an OpenAI shape whose content is null, no finish reason)."""

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 2048}]})

    async def generate(request: Request) -> Response:
        body = await request.json()
        chat = request.url.path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        n_prompt = len(prompt.split())
        stream = bool(body.get("stream"))
        if n_prompt + int(body.get("max_tokens") or 16) > 2048:
            if over_length == "html":
                return Response("<html><title>OK</title></html>", media_type="text/html")
            if stream:
                return Response("data: [DONE]\n\n", media_type="text/event-stream")
            if over_length == "empty":
                return Response(b"", media_type="application/json")
            return JSONResponse({"id": "x", "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": None}]})
        text = "fine answer"
        usage = {"prompt_tokens": n_prompt, "completion_tokens": 2, "total_tokens": n_prompt + 2}
        if stream:
            delta = {"delta": {"content": text}} if chat else {"text": text}
            events = [{"choices": [{"index": 0, **delta, "finish_reason": "stop"}]}, {"choices": [], "usage": usage}]
            return Response("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n",
                            media_type="text/event-stream")
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"} if chat
                  else {"index": 0, "text": text, "finish_reason": "stop"})
        return JSONResponse({"id": "x", "choices": [choice], "usage": usage})

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", generate, methods=["POST"]),
                            Route("/v1/completions", generate, methods=["POST"])])
    with serve_app(app, "the placeholder backend") as url:
        yield url


@pytest.mark.parametrize("over_length", ["empty", "html", "null"])
def test_a_200_with_nothing_readable_for_an_over_length_prompt_is_a_finding(run_audit: AuditRun,
                                                                           over_length: str) -> None:
    """Found: such a 200 was filed as a "late rejection" note and the check passed with "every prompt
    that cannot fit was rejected with a 4xx"; the incident's over-length requests were 200s too."""
    with placeholder_backend(over_length) as url:
        result, data = run_audit("admission", url, "--seed", "2")
    admission = check_result(data, "admission")
    assert result.exit_code == 1 and admission["verdict"] == "finding", (admission["summary"], admission["notes"])
    assert any("answered with 200 instead of a 4xx" in e["title"] for e in admission["evidence"])
    assert "Traceback" not in result.output
