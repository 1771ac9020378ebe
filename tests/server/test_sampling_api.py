"""The sampling fields a vLLM / OpenAI user sends, through the official client: each one changes
the answer the way its semantics say (penalties, logit_bias, min_p, n, best_of, echo)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import STEP_DELAY_S, RunningServer, slow_down_steps
from tests.server.test_isolation import _assert_back_to_baseline

HI = [{"role": "user", "content": "hi"}]


def _client(server: RunningServer, who: str = "alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys[who], max_retries=0, timeout=120)


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def _token(server: RunningServer, char: str) -> int:
    ids = server.app.state.serving.model.tokenizer.encode(char, add_special_tokens=False)
    assert len(ids) == 1
    return int(ids[0])


def _complete(server: RunningServer, prompt: str = "The cache", **kw: Any) -> Any:
    extra = kw.pop("extra_body", {})
    with _client(server) as client:
        return client.completions.create(model=_model(server), prompt=prompt, temperature=kw.pop("temperature", 0),
                                         max_tokens=kw.pop("max_tokens", 12),
                                         extra_body={"ignore_eos": True, **extra}, **kw)


# ---- logit_bias, penalties, min_p -----------------------------------------------------------------


def test_large_negative_bias_on_the_greedy_token_changes_the_greedy_output(server: RunningServer) -> None:
    a, b = _token(server, "a"), _token(server, "b")
    lift = {str(a): 60, str(b): 60}  # greedy now picks one of these two, whichever the model prefers
    first = _complete(server, logit_bias=lift, max_tokens=1).choices[0].text
    assert first in ("a", "b")
    banned = {**lift, str(_token(server, first)): -100}
    other = _complete(server, logit_bias=banned, max_tokens=1).choices[0].text
    assert other in ("a", "b") and other != first
    with _client(server) as client:  # chat too
        chat = client.chat.completions.create(model=_model(server), messages=HI, temperature=0, max_tokens=4,  # type: ignore[arg-type]
                                              logit_bias={str(a): 100}, extra_body={"ignore_eos": True})
    assert chat.choices[0].message.content == "aaaa"


def test_frequency_and_presence_penalties_reduce_repeats(server: RunningServer) -> None:
    a = str(_token(server, "a"))
    repeating = _complete(server, logit_bias={a: 12}, max_tokens=16).choices[0].text
    assert repeating == "a" * 16  # a model that repeats itself
    freq = _complete(server, logit_bias={a: 12}, max_tokens=16, frequency_penalty=2).choices[0].text
    assert freq.startswith("a") and freq.count("a") < 16
    presence = _complete(server, logit_bias={a: 1.5}, max_tokens=16, presence_penalty=2).choices[0].text
    plain = _complete(server, logit_bias={a: 1.5}, max_tokens=16).choices[0].text
    assert presence.count("a") < plain.count("a") or plain.count("a") <= 1


def test_repetition_penalty_is_a_vllm_extra_over_prompt_and_output(server: RunningServer) -> None:
    a = str(_token(server, "a"))
    plain = _complete(server, prompt="banana", logit_bias={a: 12}, max_tokens=8).choices[0].text
    assert plain == "a" * 8
    penalized = _complete(server, prompt="banana", logit_bias={a: 12}, max_tokens=8,
                          extra_body={"repetition_penalty": 50.0}).choices[0].text
    assert "a" not in penalized[:1]  # 'a' is in the prompt: penalized from the first token on


def test_min_p_keeps_only_likely_tokens(server: RunningServer) -> None:
    a = str(_token(server, "a"))
    # With 'a' lifted far above the rest, min_p 0.5 leaves only 'a' even at temperature 2.
    out = _complete(server, logit_bias={a: 20}, temperature=2.0, seed=1, max_tokens=12,
                    extra_body={"min_p": 0.5}).choices[0].text
    assert out == "a" * 12


# ---- n ------------------------------------------------------------------------------------------


def test_n_with_a_seed_is_reproducible_and_distinct(server: RunningServer) -> None:
    first = _complete(server, n=3, seed=123, temperature=1.0)
    again = _complete(server, n=3, seed=123, temperature=1.0)
    texts = [c.text for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert texts == [c.text for c in again.choices]
    assert len(set(texts)) == 3
    single = _complete(server, seed=123, temperature=1.0)
    assert single.choices[0].text == texts[0]
    assert first.usage is not None and single.usage is not None
    assert first.usage.prompt_tokens == single.usage.prompt_tokens  # the prompt is counted once
    assert first.usage.completion_tokens == 3 * 12


def test_n_on_chat_and_greedy_n_gives_equal_choices(server: RunningServer) -> None:
    with _client(server) as client:
        chat = client.chat.completions.create(model=_model(server), messages=HI, n=3, seed=9, temperature=1.0,  # type: ignore[arg-type]
                                              max_tokens=8, extra_body={"ignore_eos": True})
        greedy = client.chat.completions.create(model=_model(server), messages=HI, n=2, temperature=0,  # type: ignore[arg-type]
                                                max_tokens=8, extra_body={"ignore_eos": True})
    assert [c.index for c in chat.choices] == [0, 1, 2]
    assert len({c.message.content for c in chat.choices}) == 3
    assert greedy.choices[0].message.content == greedy.choices[1].message.content


def test_streamed_n_reassembles_into_the_non_streamed_texts(server: RunningServer) -> None:
    whole = _complete(server, n=2, seed=77, temperature=1.0, max_tokens=10)
    with _client(server) as client:
        stream = client.completions.create(model=_model(server), prompt="The cache", n=2, seed=77, temperature=1.0,
                                           max_tokens=10, stream=True, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True})
        parts: dict[int, str] = {0: "", 1: ""}
        finish: dict[int, str | None] = {}
        usage = None
        for chunk in stream:
            for c in chunk.choices:
                parts[c.index] += c.text
                if c.finish_reason:
                    finish[c.index] = c.finish_reason
            usage = chunk.usage or usage
        chat = client.chat.completions.create(model=_model(server), messages=HI, n=2, seed=5, temperature=1.0,  # type: ignore[arg-type]
                                              max_tokens=6, extra_body={"ignore_eos": True})
        chat_parts: dict[int, str] = {0: "", 1: ""}
        roles = set()
        for chunk in client.chat.completions.create(model=_model(server), messages=HI, n=2, seed=5,  # type: ignore[arg-type]
                                                    temperature=1.0, max_tokens=6, stream=True,
                                                    extra_body={"ignore_eos": True}):
            for c in chunk.choices:
                chat_parts[c.index] += c.delta.content or ""
                if c.delta.role:
                    roles.add(c.index)
    assert [parts[0], parts[1]] == [c.text for c in whole.choices]
    assert finish == {0: "length", 1: "length"}
    assert usage is not None and whole.usage is not None and usage.total_tokens == whole.usage.total_tokens
    assert [chat_parts[0], chat_parts[1]] == [c.message.content for c in chat.choices] and roles == {0, 1}


def test_several_prompts_with_n_are_numbered_prompt_major(server: RunningServer) -> None:
    out = _complete(server, prompt=["one", "two"], n=2, seed=3, temperature=1.0, max_tokens=4)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    two = _complete(server, prompt="two", n=2, seed=3, temperature=1.0, max_tokens=4)
    assert [c.text for c in out.choices[2:]] == [c.text for c in two.choices]


def test_choices_share_the_prompt_pages_of_their_scope(server: RunningServer) -> None:
    scope = server.scope_key("alice")
    before = server.wait_idle().prefix_hit_tokens_by_scope.get(scope, 0)
    prompt = f"a fresh prompt {time.time_ns()} that fills more than two pages of sixteen tokens each, at least"
    out = _complete(server, prompt=prompt, n=4, temperature=1.0, max_tokens=2)
    num_prompt = out.usage.prompt_tokens
    full = (num_prompt - 1) // server.engine.block_manager.page_size * server.engine.block_manager.page_size
    assert full >= 32
    after = server.wait_idle().prefix_hit_tokens_by_scope.get(scope, 0)
    assert after - before == 3 * full  # the prompt computed once, mapped by the three other choices
    assert out.usage.prompt_tokens_details.cached_tokens == 0  # the prompt itself was new


def test_a_key_limited_to_one_request_may_ask_for_several_choices(server: RunningServer) -> None:
    with _client(server, "limited") as client:
        out = client.completions.create(model=_model(server), prompt="hi", n=3, max_tokens=2, temperature=1.0)
    assert len(out.choices) == 3  # max_concurrent_requests counts the HTTP request, not its choices


def test_choices_that_cannot_fit_are_refused_before_anything_is_queued(server: RunningServer) -> None:
    with _client(server) as client, pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=_model(server), prompt="hi", n=128, max_tokens=1000)
    assert info.value.body["param"] == "n"  # type: ignore[index]
    assert info.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    with _client(server) as client, pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=_model(server), prompt=["a", "b", "c"], n=128, max_tokens=1)
    assert info.value.body["param"] == "n"  # type: ignore[index]
    assert server.wait_idle().num_running == 0


def test_hanging_up_aborts_every_choice(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = server.wait_idle().num_used_pages
    slow_down_steps(server, monkeypatch)  # 900 steps now take at least 9 s: the answer cannot finish first
    body = {"model": _model(server), "prompt": "Tell me a very long story. " * 2, "max_tokens": 900, "n": 3,
            "temperature": 1.0, "ignore_eos": True, "stream": True}
    seen: set[int] = set()
    with httpx.stream("POST", server.base_url + "/v1/completions", json=body, headers=server.headers("bob"),
                      timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {") and '"index":' in line:
                seen.add(int(line.split('"index":')[1].split(",")[0]))
            if len(seen) == 3:
                break
        assert server.stats().num_running + server.stats().num_waiting >= 1
        hung_up = time.monotonic()
    _assert_back_to_baseline(server, baseline)
    assert time.monotonic() - hung_up < 900 * STEP_DELAY_S / 2, "the choices ran on after the client left"


# ---- best_of, echo -------------------------------------------------------------------------------


def test_best_of_returns_the_choices_with_the_highest_cumulative_logprob(server: RunningServer) -> None:
    all_three = _complete(server, n=3, seed=42, temperature=1.0, max_tokens=6, logprobs=0)
    sums = [sum(c.logprobs.token_logprobs) for c in all_three.choices]
    best = _complete(server, n=1, best_of=3, seed=42, temperature=1.0, max_tokens=6)
    assert len(best.choices) == 1 and best.choices[0].index == 0 and best.choices[0].logprobs is None
    assert best.choices[0].text == all_three.choices[max(range(3), key=lambda i: sums[i])].text
    assert best.usage is not None and best.usage.completion_tokens == 18  # every sampled token was generated
    two = _complete(server, n=2, best_of=3, seed=42, temperature=1.0, max_tokens=6, logprobs=1)
    ranked = sorted(range(3), key=lambda i: -sums[i])[:2]
    assert [c.text for c in two.choices] == [all_three.choices[i].text for i in ranked]
    assert [c.index for c in two.choices] == [0, 1] and all(c.logprobs is not None for c in two.choices)


def test_echo_prepends_the_prompt(server: RunningServer) -> None:
    plain = _complete(server, prompt="Echo me", max_tokens=5)
    echoed = _complete(server, prompt="Echo me", max_tokens=5, echo=True, n=2)
    assert [c.text for c in echoed.choices] == ["Echo me" + plain.choices[0].text] * 2
    assert echoed.usage is not None and echoed.usage.completion_tokens == 10
    ids = server.app.state.serving.model.tokenizer.encode("Echo me")
    by_ids = _complete(server, prompt=ids, max_tokens=5, echo=True)
    assert by_ids.choices[0].text.endswith("Echo me" + plain.choices[0].text)
    with _client(server) as client:
        stream = client.completions.create(model=_model(server), prompt="Echo me", max_tokens=5, temperature=0,
                                           echo=True, stream=True, extra_body={"ignore_eos": True})
        streamed = "".join(c.choices[0].text for c in stream if c.choices)
    assert streamed == echoed.choices[0].text
    with _client(server) as client, pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=_model(server), prompt="x", max_tokens=0)  # 0 only with echo
    assert info.value.body["param"] == "max_tokens"  # type: ignore[index]
