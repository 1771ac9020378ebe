"""The server as an unknown client's code sees it: many mixed streams at once, logprob arithmetic,
and answers that fit the official client's pydantic models with no field the schema lacks."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel

from tests.server.conftest import RunningServer
from tests.server.test_tool_calls import NO_WHITESPACE, TOOLS


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def _variant(i: int) -> dict[str, Any]:
    """Request ``i`` of the mixed load: different n, temperature, seed, stop, logprobs and tool calls."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 3 + i % 6,
                            "seed": 100 + i, "temperature": (i % 3) * 0.6, "n": 1 + i % 3}
    if i % 4 == 1:
        body.update(logprobs=True, top_logprobs=2)
    if i % 5 == 2:
        body["stop"] = ["e", "zz"]
    if i % 16 == 3:
        body.update(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=200,
                    logit_bias=NO_WHITESPACE, temperature=1.0)
    return body


def _choices_of_answer(answer: Any) -> dict[int, tuple[str | None, list[tuple[str, str]], str | None]]:
    return {c.index: (c.message.content, [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []],
                      c.finish_reason) for c in answer.choices}


async def _streamed(client: openai.AsyncOpenAI, model: str, body: dict[str, Any]) -> tuple[Any, Any]:
    stream = await client.chat.completions.create(model=model, stream=True, stream_options={"include_usage": True},
                                                  **body)
    text: dict[int, str | None] = {}
    calls: dict[int, dict[int, list[str]]] = {}
    finish: dict[int, str | None] = {}
    usage = None
    async for chunk in stream:
        assert usage is None, "the usage chunk is the last"
        for c in chunk.choices:
            if c.delta.content:
                text[c.index] = (text.get(c.index) or "") + c.delta.content
            text.setdefault(c.index, None)
            for t in c.delta.tool_calls or []:
                entry = calls.setdefault(c.index, {}).setdefault(t.index, ["", ""])
                entry[0] += (t.function.name or "") if t.function else ""
                entry[1] += (t.function.arguments or "") if t.function else ""
            if c.finish_reason:
                finish[c.index] = c.finish_reason
        if chunk.usage is not None:
            assert chunk.choices == []
            usage = chunk.usage
    got = {i: (text[i] if not calls.get(i) else None, [tuple(v) for v in calls.get(i, {}).values()], finish.get(i))
           for i in text}
    return got, usage


@pytest.mark.slow  # 26 s on the busy 2-core machine
def test_32_mixed_streams_at_once_each_equal_its_unstreamed_answer(server: RunningServer) -> None:
    model = _model(server)

    async def one(client: openai.AsyncOpenAI, i: int) -> None:
        body = _variant(i)
        answer = await client.chat.completions.create(model=model, **body)
        got, usage = await _streamed(client, model, body)
        want = _choices_of_answer(answer)
        # an empty text streams no content delta: None there, "" in the full answer
        assert {k: (v[0] or None, v[1], v[2]) for k, v in want.items()} == got, (i, body)
        assert (usage.prompt_tokens, usage.completion_tokens) == (answer.usage.prompt_tokens,
                                                                  answer.usage.completion_tokens)

    async def main() -> None:
        async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"],
                                      max_retries=0, timeout=180) as client:
            await asyncio.gather(*(one(client, i) for i in range(32)))

    asyncio.run(main())
    stats = server.wait_idle()
    assert stats.num_used_pages == 0 or stats.num_free_pages + stats.num_used_pages == stats.num_pages


def test_logprobs_add_up(server: RunningServer) -> None:
    """The chosen token's logprob equals its entry among the top ones (tokens told apart by their
    bytes: byte tokens share the text U+FFFD), the top ones are sorted, finite, and their
    probabilities sum to at most 1; greedy picks the first of them."""
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"], max_retries=0) as client:
        for temperature in (0.0, 1.0):
            answer = client.chat.completions.create(model=_model(server), messages=[{"role": "user", "content": "x"}],
                                                    max_tokens=8, logprobs=True, top_logprobs=5, seed=4,
                                                    temperature=temperature)
            entries = answer.choices[0].logprobs.content
            assert len(entries) == answer.usage.completion_tokens
            for entry in entries:
                tops = [t.logprob for t in entry.top_logprobs]
                assert len(tops) == 5 and tops == sorted(tops, reverse=True) and all(map(math.isfinite, tops))
                assert sum(math.exp(t) for t in tops) <= 1 + 1e-4
                assert entry.logprob <= tops[0] + 1e-5 and math.isfinite(entry.logprob)
                same = [t.logprob for t in entry.top_logprobs if t.bytes == entry.bytes]
                if same:
                    assert abs(same[0] - entry.logprob) < 1e-5
                if temperature == 0.0:
                    assert entry.top_logprobs[0].bytes == entry.bytes


def _extra_fields(obj: Any, path: str = "$") -> list[str]:
    """Fields of the answer that the client's pydantic models do not know, anywhere inside it."""
    found: list[str] = []
    if isinstance(obj, BaseModel):
        found += [f"{path}.{name}" for name in obj.model_extra or {}]
        for name in type(obj).model_fields:
            found += _extra_fields(getattr(obj, name), f"{path}.{name}")
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            found += _extra_fields(item, f"{path}[{i}]")
    return found


def test_answers_and_chunks_fit_the_clients_models_exactly(server: RunningServer) -> None:
    bodies = [
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "logprobs": True, "top_logprobs": 2, "n": 2},
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "tools": TOOLS, "tool_choice": "required",
         "logit_bias": NO_WHITESPACE, "seed": 2},
    ]
    for body in bodies:
        full = {"model": _model(server), **body}
        r = httpx.post(server.base_url + "/v1/chat/completions", json=full, headers=server.headers("alice"), timeout=60)
        assert _extra_fields(ChatCompletion.model_validate(r.json())) == []
        r = httpx.post(server.base_url + "/v1/chat/completions", headers=server.headers("alice"), timeout=60,
                       json={**full, "stream": True, "stream_options": {"include_usage": True}})
        events = [line[len("data: "):] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        for event in events[:-1]:
            assert _extra_fields(ChatCompletionChunk.model_validate(json.loads(event))) == []
