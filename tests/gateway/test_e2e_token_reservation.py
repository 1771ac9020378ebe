"""End to end: a tenant's tokens-per-minute limit holds with ``max_tokens`` reservations — the official
``openai`` client against a real ``kvfence gateway`` process in front of a real backend process."""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import FakeBackend, Gateway, metrics_text, openai_client, with_metrics_key

KEYS = {name: f"kvf-gw-reserve-{name}-key" for name in ("big", "busy-stream", "busy-whole", "cut", "unnamed")}
# A prompt of "hi" is 8 tokens by the approximate counter; with max_tokens=40 a request reserves 48.
PER_REQUEST = 48


def policy(backend: FakeBackend, audit: Path) -> dict[str, Any]:
    def tenant(name: str, tpm: int) -> dict[str, Any]:
        return {"name": name, "key_sha256": hash_api_key(KEYS[name]), "organization": "acme", "workspace": name,
                "default_class": "public", "limits": {"tokens_per_minute": tpm}}

    return {
        "gateway": {"audit_log": f"sqlite:///{audit}", "capacity_refresh_s": 0, "load_protection": False},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "fake", "url": backend.url, "tier": "shared", "capacity": "policy"}],
        "tenants": [tenant("big", 1000), tenant("busy-stream", 2 * PER_REQUEST + 5),
                    tenant("busy-whole", 2 * PER_REQUEST + 5), tenant("cut", 64), tenant("unnamed", 1000)],
    }


@pytest.fixture(scope="module")
def backend() -> Iterator[FakeBackend]:
    b = FakeBackend("reserve-backend")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def gateway(backend: FakeBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw-reserve")
    gw = Gateway(with_metrics_key(policy(backend, tmp / "audit.db"), tmp), tmp)
    yield gw
    gw.stop()


def client(gw: Gateway, tenant: str) -> openai.OpenAI:
    return openai_client(gw.url, KEYS[tenant], max_retries=0)


def chat(c: openai.OpenAI, *, stream: bool, **kw: Any) -> str:
    messages = [{"role": "user", "content": "hi"}]
    if stream:
        chunks = c.chat.completions.create(model="test-model", messages=messages, stream=True, **kw)  # type: ignore[call-overload]
        return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    answer = c.chat.completions.create(model="test-model", messages=messages, **kw)  # type: ignore[call-overload]
    return str(answer.choices[0].message.content)


def metric(gw: Gateway, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metrics_text(gw.root).splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == name and ",".join(sorted(m.group(2).split(","))) == want:
            return float(m.group(3))
    return 0.0


def test_one_huge_max_tokens_is_refused_before_it_reaches_the_backend(gateway: Gateway,
                                                                      backend: FakeBackend) -> None:
    backend.clear()
    with pytest.raises(openai.RateLimitError) as err:
        chat(client(gateway, "big"), stream=False, max_tokens=100_000)
    body = err.value.response.json()["error"]
    assert body["code"] == "tokens_per_minute_exceeded" and "1000 tokens per minute" in body["message"]
    assert "request too large" in body["message"] and "retry-after" not in err.value.response.headers
    with pytest.raises(openai.RateLimitError):  # n choices multiply the reservation
        chat(client(gateway, "big"), stream=True, max_tokens=200, n=5)
    assert backend.received() == []
    # a request that fits is served, and only what it really generated stays charged (7 tokens)
    assert chat(client(gateway, "big"), stream=True, max_tokens=500) == "hello from reserve-backend"
    assert chat(client(gateway, "big"), stream=False, max_tokens=500) == "hello from reserve-backend"
    assert metric(gateway, "kvfence_gateway_tokens_total", tenant="big", kind="completion", source="usage") == 14


def _four_at_once(backend: FakeBackend, c: openai.OpenAI, streams: list[bool], **kw: Any) -> tuple[list[str], list[str]]:
    """Four chats whose answers overlap (the backend waits 1.5 s): each one's text or "429", and the
    429s' messages (each must be a tokens-per-minute refusal)."""
    outcomes: list[str] = []
    refusals: list[str] = []
    backend.control(delay_s=1.5)
    try:
        with concurrent.futures.ThreadPoolExecutor(len(streams)) as pool:
            futures = [pool.submit(chat, c, stream=stream, **kw) for stream in streams]
            for f in futures:
                try:
                    outcomes.append(f.result(timeout=30))
                except openai.RateLimitError as exc:
                    assert exc.response.json()["error"]["code"] == "tokens_per_minute_exceeded"
                    refusals.append(exc.response.json()["error"]["message"])
                    outcomes.append("429")
    finally:
        backend.control(delay_s=0.0)
    return outcomes, refusals


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_concurrent_requests_are_held_to_the_limit_then_settled(gateway: Gateway, backend: FakeBackend,
                                                                 stream: bool) -> None:
    busy = client(gateway, "busy-stream" if stream else "busy-whole")
    outcomes, refusals = _four_at_once(backend, busy, [stream] * 4, max_tokens=40)
    assert all(f"{2 * PER_REQUEST + 5} tokens per minute" in message for message in refusals)
    # two reservations of 48 fit the limit of 101; the other two are refused while they are held
    assert sorted(outcomes) == ["429", "429", "hello from reserve-backend", "hello from reserve-backend"]
    # settled to 7 completion tokens each: 2 x (8 + 7) = 30 stay in the window, so 48 more fit again
    assert chat(busy, stream=stream, max_tokens=40) == "hello from reserve-backend"


def test_a_stream_cut_short_settles_its_reservation(gateway: Gateway, backend: FakeBackend) -> None:
    cut = client(gateway, "cut")
    backend.control(break_after=2)  # the backend drops the connection after two 4-character chunks
    try:
        with pytest.raises(openai.APIError):
            chat(cut, stream=True, max_tokens=40)
    finally:
        backend.control(break_after=None)
    # Settled to what was generated (8 characters, counted as 3 tokens): 8 + 3 in the window and nothing
    # held, so another 48 fit the limit of 64. Had the 40 stayed reserved, 11 + 40 + 48 would not.
    assert chat(cut, stream=False, max_tokens=40) == "hello from reserve-backend"


def test_requests_without_max_tokens_are_held_to_the_limit(gateway: Gateway, backend: FakeBackend) -> None:
    """No max_tokens and a backend whose context is unknown: each request reserves the stated default
    (4096), capped to what the limit of 1000 leaves after its prompt. Before, such requests reserved
    nothing and all four ran at once, each free to generate up to the backend's context."""
    unnamed = client(gateway, "unnamed")
    outcomes, _ = _four_at_once(backend, unnamed, [True, False, True, False])
    assert sorted(outcomes) == ["429", "429", "429", "hello from reserve-backend"]
    # settled when it ended: the next ones run one after another without waiting for the window
    for stream in (True, False, True):
        assert chat(unnamed, stream=stream) == "hello from reserve-backend"
