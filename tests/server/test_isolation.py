"""Many tenants at once: answers do not depend on who else is served, hits stay inside an org,
and an abandoned request gives its pages back (zeroed)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvfence.server.metrics import scope_label
from tests.server.conftest import STEP_DELAY_S, TENANTS, RunningServer, slow_down_steps

WHO = ["alice", "alice2", "bob", "carol"]  # acme (two workspaces), globex, initech
SHARED = "Common preamble that every organization sends, long enough to fill pages. " * 2


def _prefix_hits(server: RunningServer) -> dict[tuple[str, str], float]:
    # The per-organisation view: over HTTP it needs the metrics key (tests/security/test_metrics_access.py).
    text = server.app.state.metrics.render(per_tenant=True).decode()
    hits: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "kvfence_prefix_cache_hit_tokens":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    hits[(sample.labels["scope"], sample.labels["organization"])] = sample.value
    return hits


def _prompt(i: int) -> tuple[str, str]:
    who = WHO[i % len(WHO)]
    org = TENANTS[who][0]
    # Same shared preamble for everybody, an org-wide prefix, and a per-prompt question; 8 distinct
    # prompts, each sent by 4 concurrent clients.
    return who, f"{SHARED}[{org} internal handbook, section {i % 2}] question {i % 8}:"


def test_32_concurrent_streams_from_three_orgs(server: RunningServer) -> None:
    model = server.app.state.serving.model.public_name
    params = {"max_tokens": 6, "temperature": 0, "extra_body": {"ignore_eos": True}}
    hits_before = _prefix_hits(server)

    # Alone: each (tenant, prompt) answered with nothing else in flight.
    solo: dict[tuple[str, str], str] = {}
    for i in range(32):
        who, prompt = _prompt(i)
        if (who, prompt) in solo:
            continue
        with openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys[who], max_retries=0) as client:
            solo[(who, prompt)] = client.completions.create(model=model, prompt=prompt, **params).choices[0].text  # type: ignore[arg-type]

    async def one(i: int) -> tuple[int, str]:
        who, prompt = _prompt(i)
        async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=server.keys[who],
                                      max_retries=0, timeout=120) as client:
            stream = await client.completions.create(model=model, prompt=prompt, stream=True, **params)  # type: ignore[arg-type]
            parts = [c.choices[0].text async for c in stream if c.choices]
        return i, "".join(parts)

    async def all_at_once() -> list[tuple[int, str]]:
        return await asyncio.gather(*(one(i) for i in range(32)))

    for i, text in asyncio.run(all_at_once()):
        who, prompt = _prompt(i)
        assert text == solo[(who, prompt)], f"client {i} ({who}) got a different answer under load"

    # Every scope that got prefix hits is the scope of one organization, labelled with it; the
    # shared preamble was sent by all three organizations yet never hit across them.
    org_scope = {TENANTS[w][0]: scope_label(server.scope_key(w)) for w in WHO}
    hits_after = _prefix_hits(server)
    grown = {k: v - hits_before.get(k, 0.0) for k, v in hits_after.items() if v > hits_before.get(k, 0.0)}
    assert grown, "the repeated prompts should have hit the prefix cache"
    for scope, org in grown:
        assert org_scope.get(org) == scope, f"hits under scope {scope} labelled {org} do not belong to that org"
    assert {org for _, org in grown} == {"acme", "globex", "initech"}


def _stream_request(server: RunningServer) -> dict[str, object]:
    return {"model": server.app.state.serving.model.public_name, "prompt": "Tell me a very long story. " * 2,
            "max_tokens": 960, "temperature": 0, "ignore_eos": True, "stream": True}


def _assert_back_to_baseline(server: RunningServer, baseline_used: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        stats = server.wait_idle()
        if stats.num_used_pages == baseline_used or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert stats.num_used_pages == baseline_used
    assert server.app.state.serving.engine.num_pending == 0
    assert server.engine.pool_is_zero(), "pages freed by the abort must be zero-filled (I2)"


def test_disconnect_mid_stream_returns_the_pool_to_baseline(server: RunningServer,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = server.wait_idle().num_used_pages
    slow_down_steps(server, monkeypatch)  # 960 steps now take at least 9.6 s
    received = 0
    with httpx.stream("POST", server.base_url + "/v1/completions", json=_stream_request(server),
                      headers=server.headers("bob"), timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                received += 1
            if received >= 3:
                break  # leave mid-stream: the connection is closed here
        assert server.stats().num_used_pages > baseline or server.app.state.serving.engine.num_pending > 0
        hung_up = time.monotonic()
    _assert_back_to_baseline(server, baseline)
    assert time.monotonic() - hung_up < 960 * STEP_DELAY_S / 2, "the request ran on after the client left"


def test_disconnect_while_waiting_for_a_full_answer(server: RunningServer) -> None:
    baseline = server.wait_idle().num_used_pages
    body = dict(_stream_request(server), stream=False)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/v1/completions", content=json.dumps(body),
                   headers=server.headers("carol"), timeout=0.4)
    _assert_back_to_baseline(server, baseline)
