"""Pure parts of the gateway: caps and trimming, token counting, answer filtering, limits, capacity parsing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.gateway.admission.capacity import (
    parse_kvfence_capacity,
    parse_models_max_len,
    parse_vllm_cache_config,
)
from kvfence.gateway.admission.caps import completion_budget, enforce_cap
from kvfence.gateway.admission.limits import TenantLimiter
from kvfence.gateway.admission.tokens import ApproximateCounter, TokenizerCounter
from kvfence.gateway.admission.trim import REMOVED_MARKER, rank_retrieved
from kvfence.gateway.answer.filter import AnswerFilter, FilterChain
from kvfence.gateway.errors import GatewayRequestError, PromptTooLongError, RateLimited
from kvfence.gateway.policy.schema import OverCapConfig, TenantLimits
from kvfence.gateway.policy.tenants import GatewayTenant
from kvfence.gateway.routing.cache_salt import apply_cache_salt
from kvfence.openai_wire import SSEDecoder, encode_event, event_data
from tests.gateway.sample_hooks import EMAIL, PLACEHOLDER, _RestoreFilter

APPROX = ApproximateCounter()


# -- caps and trimming ---------------------------------------------------------------------------
def test_cap_rejects_over_the_smaller_limit() -> None:
    body = {"messages": [{"role": "user", "content": "x" * 3000}], "max_tokens": 10}
    with pytest.raises(PromptTooLongError, match="policy allows 500"):
        enforce_cap(body, "chat", APPROX, prompt_limit=500, context_limit=4096, over_cap=OverCapConfig())
    with pytest.raises(PromptTooLongError, match="backend can hold 900"):
        enforce_cap(body, "chat", APPROX, prompt_limit=None, context_limit=900, over_cap=OverCapConfig())
    ok = enforce_cap(body, "chat", APPROX, prompt_limit=2000, context_limit=2000, over_cap=OverCapConfig())
    assert ok.prompt_tokens == 1000 + 4 + 3 and ok.tokens_cut == 0


def test_max_tokens_counts_against_the_context() -> None:
    body = {"prompt": "y" * 300, "max_tokens": 950}  # 100 prompt tokens + 950 > 1024
    with pytest.raises(PromptTooLongError):
        enforce_cap(body, "completions", APPROX, prompt_limit=None, context_limit=1024, over_cap=OverCapConfig())
    with pytest.raises(PromptTooLongError, match="leaves no room"):
        enforce_cap({"prompt": "a", "max_tokens": 2000}, "completions", APPROX, prompt_limit=None,
                    context_limit=1024, over_cap=OverCapConfig())
    for bad in (-3, "5", True, 2.5):
        with pytest.raises(GatewayRequestError, match="integer >= 0"):
            completion_budget({"max_tokens": bad})
    # Scoring a prompt (echo + logprobs, max_tokens 0) passes, capped as one position past it.
    assert completion_budget({"max_tokens": 0}) == 1
    assert completion_budget({"max_completion_tokens": 0, "max_tokens": 50}) == 1
    with pytest.raises(PromptTooLongError):
        enforce_cap({"prompt": list(range(1024)), "max_tokens": 0}, "completions", APPROX, prompt_limit=None,
                    context_limit=1024, over_cap=OverCapConfig())
    # A backend that scores max_tokens 0 without sampling (kvfence says so): counted as 0, so a
    # prompt of exactly the context fits; one token more still does not.
    assert completion_budget({"max_tokens": 0}, scores_max_tokens_0=True) == 0
    assert completion_budget({"max_tokens": 7}, scores_max_tokens_0=True) == 7
    assert completion_budget({}, scores_max_tokens_0=True) == 1
    fits = enforce_cap({"prompt": list(range(1024)), "max_tokens": 0, "echo": True, "logprobs": 1}, "completions",
                       APPROX, prompt_limit=None, context_limit=1024, over_cap=OverCapConfig(),
                       scores_max_tokens_0=True)
    assert fits.prompt_tokens == 1024
    with pytest.raises(PromptTooLongError):
        enforce_cap({"prompt": list(range(1025)), "max_tokens": 0}, "completions", APPROX, prompt_limit=None,
                    context_limit=1024, over_cap=OverCapConfig(), scores_max_tokens_0=True)
    with pytest.raises(PromptTooLongError):  # any other budget is counted as it is
        enforce_cap({"prompt": list(range(1024)), "max_tokens": 1}, "completions", APPROX, prompt_limit=None,
                    context_limit=1024, over_cap=OverCapConfig(), scores_max_tokens_0=True)


def test_token_id_prompts_count_exactly() -> None:
    with pytest.raises(PromptTooLongError):
        enforce_cap({"prompt": list(range(600))}, "completions", APPROX, prompt_limit=500, context_limit=None,
                    over_cap=OverCapConfig())


def _rag(n_docs: int) -> list[dict[str, Any]]:
    docs = [{"role": "tool", "tool_call_id": f"c{i}", "content": f"gardening tips number {i} about tomatoes " * 20}
            for i in range(n_docs)]
    docs.insert(2, {"role": "tool", "tool_call_id": "hit", "content": "the invoice total for order 7781 is 310 euro " * 5})
    return [{"role": "system", "content": "be brief"}, *docs,
            {"role": "user", "content": "what is the invoice total for order 7781?"}]


def test_trim_keeps_the_relevant_block_and_reports_tokens_cut() -> None:
    body = {"messages": _rag(8)}
    before = APPROX.count_chat(body["messages"])
    result = enforce_cap(body, "chat", APPROX, prompt_limit=before // 3, context_limit=None,
                         over_cap=OverCapConfig(action="trim"))  # type: ignore[arg-type]
    assert result.tokens_cut > 0 and result.prompt_tokens <= before // 3
    contents = [m["content"] for m in body["messages"]]
    assert any("invoice total" in c for c in contents)
    assert contents.count(REMOVED_MARKER) >= 1
    assert body["messages"][-1]["content"].startswith("what is")  # the question is never touched


def test_trim_that_cannot_fit_is_still_rejected() -> None:
    body = {"messages": [{"role": "user", "content": "q " * 3000}]}
    with pytest.raises(PromptTooLongError):
        enforce_cap(body, "chat", APPROX, prompt_limit=100, context_limit=None,
                    over_cap=OverCapConfig(action="trim"))  # type: ignore[arg-type]


def test_bm25_ranking_least_relevant_first() -> None:
    messages = _rag(3)
    order = rank_retrieved(messages, [1, 2, 3, 4])
    assert order[-1] == 3  # the invoice block is the most relevant


# -- token counting ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["hello world the quick brown fox", "<|user|> <|assistant|>"],
                            trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tok")
    tok.save(str(path / "tokenizer.json"))
    template = "{% for m in messages %}<|{{ m.role }}|> {{ m.content }} {% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "bos_token": "<s>"}))
    return path


def test_exact_counts_with_a_local_tokenizer_and_chat_template(tokenizer_dir: Path) -> None:
    counter = TokenizerCounter(tokenizer_dir)
    assert counter.is_exact and counter.count_text("hello world") == 2
    # "<|user|> hello world <|assistant|>": whitespace pre-tokenizer splits the markers into pieces
    rendered = counter.count_chat([{"role": "user", "content": "hello world"}])
    assert rendered == counter.count_text("<|user|> hello world <|assistant|>")


def test_approximation_over_counts_english() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 50
    assert APPROX.count_text(text) >= len(text.split())  # never fewer tokens than words


# -- answer filtering ----------------------------------------------------------------------------
def _restore_chain() -> FilterChain:
    return FilterChain([_RestoreFilter()])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=60), max_size=8))
def test_placeholder_split_anywhere_is_restored(cuts: list[int]) -> None:
    answer = f"Dear {PLACEHOLDER}, see {PLACEHOLDER}."
    points = sorted({min(c, len(answer)) for c in cuts})
    pieces = [answer[a:b] for a, b in zip([0, *points], [*points, len(answer)], strict=True)]
    f = AnswerFilter("chat", _restore_chain)
    out = ""
    for piece in pieces:
        chunk = f.filter_chunk({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        out += chunk["choices"][0]["delta"].get("content", "")
    out += f.filter_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})["choices"][0][
        "delta"].get("content", "")
    assert out == f"Dear {EMAIL}, see {EMAIL}."


def test_choices_are_filtered_separately_and_flushed() -> None:
    f = AnswerFilter("completions", _restore_chain)
    f.filter_chunk({"choices": [{"index": 0, "text": "<EMA", "finish_reason": None},
                                {"index": 1, "text": "<EMAIL_", "finish_reason": None}]})
    c0 = f.filter_chunk({"choices": [{"index": 0, "text": "IL_1>", "finish_reason": "stop"}]})
    assert c0["choices"][0]["text"] == EMAIL
    tail = f.flush()  # choice 1 never finished: its held text comes out at the end
    assert tail[0]["choices"][0] == {"index": 1, "text": "<EMAIL_", "finish_reason": None}


def test_whole_answer_filter() -> None:
    f = AnswerFilter("chat", _restore_chain)
    body = f.filter_completion({"choices": [{"index": 0, "message": {"role": "assistant",
                                                                      "content": f"hi {PLACEHOLDER}"}}]})
    assert body["choices"][0]["message"]["content"] == f"hi {EMAIL}"


def test_sse_decoder_handles_split_events_and_crlf() -> None:
    d = SSEDecoder()
    stream = encode_event({"a": 1}) + b": keep-alive\r\n\r\n" + encode_event("[DONE]")
    events = []
    for i in range(0, len(stream), 5):
        events += list(d.feed(stream[i:i + 5]))
    assert [event_data(e) for e in events] == ['{"a":1}', None, "[DONE]"]


# -- salts, limits, capacity ---------------------------------------------------------------------
def test_client_salt_fields_are_stripped() -> None:
    body = {"cache_salt": "mine", "prompt_cache_key": "k", "model": "m"}
    assert apply_cache_salt(body, "gw") is True and body == {"model": "m", "cache_salt": "gw"}
    body = {"model": "m", "cache_salt": "mine"}
    apply_cache_salt(body, None)
    assert "cache_salt" not in body


def test_rate_and_concurrency_limits() -> None:
    now = [0.0]
    limiter = TenantLimiter(clock=lambda: now[0])
    t = GatewayTenant("t", "o", "w", "public", TenantLimits(requests_per_minute=2, max_concurrent=1))
    lease = limiter.acquire_now(t)
    with pytest.raises(RateLimited, match="in flight"):
        limiter.acquire_now(t)
    lease.release_now()
    lease.release_now()  # idempotent
    limiter.acquire_now(t).release_now()
    with pytest.raises(RateLimited, match="per minute") as err:
        limiter.acquire_now(t)
    assert err.value.headers()["Retry-After"] == "60"
    now[0] = 60.5
    limiter.acquire_now(t).release_now()


def test_capacity_parsers() -> None:
    metrics = ('vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="42580",'
               'num_cpu_blocks="0"} 1.0\n')
    assert parse_vllm_cache_config(metrics) == 42580 * 16
    assert parse_vllm_cache_config("# nothing\n") is None
    assert parse_models_max_len({"data": [{"id": "m", "max_model_len": 1048576}]}, "m") == 1048576
    assert parse_kvfence_capacity({"max_model_len": 2048, "pool_tokens": 4096}) == (2048, 4096)
    assert parse_kvfence_capacity({"num_pages": 10, "page_size": 16}) == (None, 160)
    assert parse_kvfence_capacity({"num_blocks": 10, "block_size": 16}) == (None, 160)


def test_tool_call_arguments_are_filtered_stream_and_whole() -> None:
    f = AnswerFilter("chat", _restore_chain)
    pieces = ['{"to": "<EMA', 'IL_1>", "cc": "<EMAIL', '_1>"}']
    out = ""
    for i, piece in enumerate(pieces):
        delta: dict[str, Any] = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
        if i == 0:
            delta["tool_calls"][0].update(id="call_1", type="function")
            delta["tool_calls"][0]["function"]["name"] = "send_mail"
        chunk = f.filter_chunk({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        out += chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
    last = f.filter_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    for call in last["choices"][0]["delta"].get("tool_calls", []):
        out += call["function"]["arguments"]
    assert out == f'{{"to": "{EMAIL}", "cc": "{EMAIL}"}}'
    whole = AnswerFilter("chat", _restore_chain).filter_completion({"choices": [{"index": 0, "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "c", "type": "function",
                        "function": {"name": "f", "arguments": f'{{"a": "{PLACEHOLDER}"}}'}}]}}]})
    assert whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == f'{{"a": "{EMAIL}"}}'


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30),
       st.sampled_from(["\n\n", "\r\n\r\n"]))
def test_sse_stream_split_anywhere_restores_every_choice(cuts: list[int], sep: str) -> None:
    from kvfence.gateway.answer.relay import _process_event

    texts = {0: f"hi {PLACEHOLDER}!", 1: f"{PLACEHOLDER} and {PLACEHOLDER}"}
    events = []
    for i in range(max(len(t) for t in texts.values())):
        for index, text in texts.items():
            if i < len(text):
                chunk = {"id": "x", "choices": [{"index": index, "delta": {"content": text[i]}, "finish_reason": None}]}
                events.append("data: " + json.dumps(chunk))
    events.append(": keep-alive")
    events.append("data: [DONE]")
    raw = (sep.join(events) + sep).encode()
    decoder, out = SSEDecoder(), []
    f = AnswerFilter("chat", _restore_chain)
    position = 0
    for size in cuts * 50:
        if position >= len(raw):
            break
        for event in decoder.feed(raw[position:position + size]):
            out.extend(_process_event(event, f, None))
        position += size
    for event in decoder.feed(raw[position:]):
        out.extend(_process_event(event, f, None))
    got = {0: "", 1: ""}
    for event in b"".join(out).split(b"\n\n"):
        data = event_data(event)
        if data is None or data == "[DONE]":
            continue
        for choice in json.loads(data)["choices"]:
            got[choice["index"]] += choice["delta"].get("content", "")
    assert got == {i: t.replace(PLACEHOLDER, EMAIL) for i, t in texts.items()}
    assert b"".join(out).endswith(b"data: [DONE]\n\n")


def test_media_parts_are_charged_by_the_approximation() -> None:
    content = [{"type": "text", "text": "what is in this picture?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    with_image = APPROX.count_chat([{"role": "user", "content": content}])
    text_only = APPROX.count_chat([{"role": "user", "content": content[:1]}])
    assert with_image - text_only == 1024
