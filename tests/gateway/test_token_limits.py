"""Tokens per minute, pure logic: the in-process window, and what an answer cost (``usage.py``)."""

from __future__ import annotations

import asyncio
import json

import pytest

from kvfence.gateway.admission.limits import TenantLimiter
from kvfence.gateway.admission.tokens import ApproximateCounter
from kvfence.gateway.admission.usage import StreamUsage, answer_completion_tokens, wants_usage_injection
from kvfence.gateway.errors import RateLimited
from kvfence.gateway.policy.schema import TenantLimits
from kvfence.gateway.policy.tenants import GatewayTenant

APPROX = ApproximateCounter()


def tenant(tpm: int, name: str = "t") -> GatewayTenant:
    return GatewayTenant(name, "o", "w", "public", TenantLimits(tokens_per_minute=tpm))


def test_prompt_tokens_are_admitted_until_the_window_is_full() -> None:
    now = [0.0]
    limiter = TenantLimiter(clock=lambda: now[0])
    t = tenant(100)
    limiter.acquire_now(t).release_now()
    limiter.admit_tokens(t, 60)
    now[0] = 10.0
    with pytest.raises(RateLimited, match="100 tokens per minute") as err:
        limiter.admit_tokens(t, 50)  # 60 + 50 > 100
    assert err.value.status_code == 429 and err.value.code == "tokens_per_minute_exceeded"
    # the 60 tokens of t=0 leave the window at t=60: 50 s from now
    assert err.value.headers()["Retry-After"] == "50"
    limiter.admit_tokens(t, 40)  # exactly fills the window
    assert limiter.tokens_used("t") == 100


def test_a_full_window_refuses_before_the_body_is_read() -> None:
    now = [0.0]
    limiter = TenantLimiter(clock=lambda: now[0])
    t = tenant(100)
    limiter.add_tokens(t, 70)  # completion tokens are charged after the fact, past the limit if need be
    now[0] = 5.0
    limiter.add_tokens(t, 70)
    with pytest.raises(RateLimited, match="used 140") as err:
        limiter.acquire_now(t)
    # 41 tokens must leave before one more fits: the first entry (t=0, 70 tokens) does, at t=60
    assert err.value.headers()["Retry-After"] == "55"
    assert limiter.in_flight("t") == 0  # a refused request holds nothing


def test_the_window_slides() -> None:
    now = [0.0]
    limiter = TenantLimiter(clock=lambda: now[0], window_s=10.0)
    t = tenant(100)
    limiter.admit_tokens(t, 80)
    now[0] = 6.0
    limiter.add_tokens(t, 20)
    with pytest.raises(RateLimited):
        limiter.acquire_now(t)
    now[0] = 10.0  # the first 80 have left (a window is (now - 10, now])
    assert limiter.tokens_used("t") == 20
    limiter.acquire_now(t).release_now()
    limiter.admit_tokens(t, 80)
    with pytest.raises(RateLimited):
        limiter.admit_tokens(t, 1)
    now[0] = 16.0
    assert limiter.tokens_used("t") == 80


def test_a_prompt_larger_than_the_whole_limit_has_no_retry_after() -> None:
    limiter = TenantLimiter()
    with pytest.raises(RateLimited, match="request too large") as err:
        limiter.admit_tokens(tenant(100), 101)
    assert "Retry-After" not in err.value.headers()  # waiting cannot help (as OpenAI's answer)
    assert limiter.tokens_used("t") == 0


def test_tenants_have_separate_windows_and_no_limit_counts_nothing() -> None:
    limiter = TenantLimiter()
    a, b = tenant(10, "a"), tenant(10, "b")
    limiter.admit_tokens(a, 10)
    with pytest.raises(RateLimited):
        limiter.acquire_now(a)
    limiter.acquire_now(b).release_now()
    free = GatewayTenant("free", "o", "w", "public", TenantLimits())
    limiter.admit_tokens(free, 10**9)
    limiter.add_tokens(free, 10**9)
    assert limiter.tokens_used("free") == 0


def test_lease_charges_through_the_limiter() -> None:
    limiter = TenantLimiter()
    t = tenant(50)

    async def run() -> None:
        lease = await limiter.acquire(t)
        await lease.admit_prompt(30)
        await lease.add_completion(30)
        await lease.release()

    asyncio.run(run())
    assert limiter.tokens_used("t") == 60 and limiter.in_flight("t") == 0


# -- what an answer cost ------------------------------------------------------------------------
def test_whole_answer_usage_or_counted_text() -> None:
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 30}}],
              "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}
    assert answer_completion_tokens(answer, APPROX) == (9, "usage")
    del answer["usage"]
    assert answer_completion_tokens(answer, APPROX) == (10, "count")  # 30 bytes / 3
    completion = {"choices": [{"index": 0, "text": "y" * 9}, {"index": 1, "text": "z" * 9}], "usage": None}
    assert answer_completion_tokens(completion, APPROX) == (6, "count")
    tools = {"choices": [{"message": {"content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get", "arguments": '{"q": 1}'}}]}}]}
    assert answer_completion_tokens(tools, APPROX) == (4, "count")  # "get" + '{"q": 1}' = 11 bytes


def chunk(content: str | None = None, usage: dict[str, int] | None = None, choices: bool = True) -> dict[str, object]:
    out: dict[str, object] = {"id": "c", "object": "chat.completion.chunk",
                              "choices": [{"index": 0, "delta": {"content": content}}] if choices else []}
    if usage is not None:
        out["usage"] = usage
    return out


def test_stream_usage_injected_is_hidden_from_the_client() -> None:
    usage = StreamUsage(APPROX, injected=True)
    assert usage.observe(chunk("hello")) == "pass"
    assert usage.observe(chunk(usage={"completion_tokens": 3}, choices=False)) == "drop"
    assert usage.completion_tokens() == (3, "usage")


def test_stream_usage_the_client_asked_for_passes() -> None:
    usage = StreamUsage(APPROX, injected=False)
    assert usage.observe(chunk("hello")) == "pass"
    assert usage.observe(chunk(usage={"completion_tokens": 3}, choices=False)) == "pass"
    assert usage.completion_tokens() == (3, "usage")


def test_usage_riding_on_a_chunk_with_choices_is_removed_when_injected() -> None:
    # OpenAI sends `"usage": null` on every chunk once include_usage is on; some backends send running
    # totals on each chunk: the last figure wins, and the client never sees a field it did not ask for.
    usage = StreamUsage(APPROX, injected=True)
    first = chunk("a", usage=None)
    first["usage"] = None
    assert usage.observe(first) == "edited" and "usage" not in first
    second = chunk("b", usage={"completion_tokens": 2})
    assert usage.observe(second) == "edited" and "usage" not in second
    assert usage.completion_tokens() == (2, "usage")


def test_stream_without_usage_is_counted_from_its_text() -> None:
    usage = StreamUsage(APPROX, injected=True)
    for piece in ("abc", "def", "ghi", None):
        usage.observe(chunk(piece))
    usage.observe(json.loads('{"choices": [{"index": 0, "text": "xyz"}]}'))  # completions-shaped
    assert usage.completion_tokens() == (4, "count")  # 12 bytes / 3
    assert StreamUsage(APPROX, injected=False).completion_tokens() == (0, "count")


def test_usage_injection_only_when_the_client_did_not_ask() -> None:
    assert wants_usage_injection({"stream": True})
    assert wants_usage_injection({"stream": True, "stream_options": {"include_usage": False}})
    assert not wants_usage_injection({"stream": True, "stream_options": {"include_usage": True}})


def test_filtered_stream_with_usage_counts_what_the_backend_generated() -> None:
    # hooks and a token limit on the same stream: the filter restores placeholders, the usage chunk the
    # gateway asked for is dropped, and the text is counted as the backend sent it
    from kvfence.gateway.answer.filter import AnswerFilter
    from kvfence.gateway.answer.relay import _process_event
    from kvfence.openai_wire import event_data
    from tests.gateway.sample_hooks import EMAIL, PLACEHOLDER
    from tests.gateway.test_pure import _restore_chain

    filters = AnswerFilter("chat", _restore_chain)
    usage = StreamUsage(APPROX, injected=True)
    events = [b"data: " + json.dumps(chunk(PLACEHOLDER)).encode(),
              b"data: " + json.dumps(chunk(usage={"completion_tokens": 11}, choices=False)).encode(),
              b"data: [DONE]"]
    out = b"".join(piece for event in events for piece in _process_event(event, filters, usage))
    datas = [event_data(e) for e in out.split(b"\n\n") if e.strip()]
    assert datas[-1] == "[DONE]" and len(datas) == 2
    assert json.loads(datas[0] or "")["choices"][0]["delta"]["content"] == EMAIL
    assert usage.completion_tokens() == (11, "usage")
