"""Placeholders inside ``logprobs``: the tokens of a placeholder (split across tokens and chunks) carry
the restored value, never placeholder text or half a name; streamed and not, chat and completions."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvfence.gateway.answer.filter import AnswerFilter, FilterChain
from kvfence.gateway.protection.pseudonymise.token_restore import TokenRestorer
from tests.gateway.protection.test_hook import chat, ctx, make_hook, make_policy, run

EMAIL = "ann@acme.io"
# How a model writes "Mail <EMAIL_1> now" token by token (the placeholder split across five tokens).
TOKENS = ["Mail", " <", "EMAIL", "_", "1", ">", " now"]


def setup(endpoint: str = "chat") -> AnswerFilter:
    hook, _ = make_hook(make_policy())
    c = ctx(endpoint=endpoint)
    body = chat(f"write to {EMAIL}") if endpoint == "chat" else {"model": "m", "prompt": f"write to {EMAIL}"}
    out = run(hook.on_request(c, body))
    assert EMAIL not in str(out)
    return AnswerFilter(endpoint, lambda: FilterChain([hook.response_filter(c)]))


def chat_entry(token: str) -> dict[str, Any]:
    return {"token": token, "logprob": -0.5, "bytes": list(token.encode()),
            "top_logprobs": [{"token": token, "logprob": -0.5, "bytes": list(token.encode())},
                             {"token": "x", "logprob": -2.0, "bytes": [120]}]}


def no_placeholder_text(tokens: list[str], tops: list[Any]) -> None:
    text = "".join(tokens) + repr(tops)
    for piece in ("<EMAIL", "EMAIL", "_1>", "MAIL_"):
        assert piece not in text


def test_whole_chat_answer() -> None:
    filters = setup()
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(TOKENS)},
                           "logprobs": {"content": [chat_entry(t) for t in TOKENS], "refusal": None},
                           "finish_reason": "stop"}]}
    filters.filter_completion(answer)
    choice = answer["choices"][0]
    entries = choice["logprobs"]["content"]
    tokens = [e["token"] for e in entries]
    assert choice["message"]["content"] == f"Mail {EMAIL} now"
    assert "".join(tokens) == choice["message"]["content"]  # tokens still spell the answer
    assert len(entries) == len(TOKENS)  # one entry per generated token, positions kept
    assert tokens == ["Mail", f" {EMAIL}", "", "", "", "", " now"]
    no_placeholder_text(tokens, [e["top_logprobs"] for e in entries])
    for e in entries:
        assert e["bytes"] == list(e["token"].encode())
    assert entries[0]["top_logprobs"] and entries[-1]["top_logprobs"]  # untouched where no placeholder was
    assert all(e["top_logprobs"] == [] for e in entries[1:6])  # alternatives to placeholder pieces: dropped
    assert choice["logprobs"]["refusal"] is None


@pytest.mark.parametrize("per_chunk", [1, 2, 3])
def test_streamed_chat_answer_split_across_chunks(per_chunk: int) -> None:
    filters = setup()
    out_text, out_entries = "", []
    chunks = [TOKENS[i:i + per_chunk] for i in range(0, len(TOKENS), per_chunk)]
    for n, part in enumerate(chunks):
        last = n == len(chunks) - 1
        chunk = {"choices": [{"index": 0, "delta": {"content": "".join(part)},
                              "logprobs": {"content": [chat_entry(t) for t in part]},
                              "finish_reason": "stop" if last else None}]}
        filters.filter_chunk(chunk)
        choice = chunk["choices"][0]
        out_text += choice["delta"].get("content") or ""
        emitted = choice["logprobs"]["content"]
        out_entries += emitted
        no_placeholder_text([e["token"] for e in emitted], [e["top_logprobs"] for e in emitted])
    tokens = [e["token"] for e in out_entries]
    assert out_text == f"Mail {EMAIL} now" == "".join(tokens)
    assert len(out_entries) == len(TOKENS)


def test_streamed_chat_without_finish_reason_is_flushed() -> None:
    filters = setup()
    chunk = {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Mail <EMA"},
                                      "logprobs": {"content": [chat_entry("Mail"), chat_entry(" <EMA")]},
                                      "finish_reason": None}]}
    filters.filter_chunk(chunk)
    assert [e["token"] for e in chunk["choices"][0]["logprobs"]["content"]] == ["Mail"]
    rest = filters.flush()
    tokens = [e["token"] for c in rest for ch in c["choices"] for e in (ch.get("logprobs") or {}).get("content", [])]
    assert tokens == [" <EMA"]  # not a placeholder after all: passed on as written


def test_whole_completions_answer_with_offsets() -> None:
    filters = setup("completions")
    offsets, at = [], 0
    for t in TOKENS:
        offsets.append(at)
        at += len(t)
    answer = {"choices": [{"index": 0, "text": "".join(TOKENS), "finish_reason": "stop", "logprobs": {
        "tokens": list(TOKENS), "token_logprobs": [-0.1] * len(TOKENS),
        "top_logprobs": [{t: -0.1, "x": -3.0} for t in TOKENS], "text_offset": offsets}}]}
    filters.filter_completion(answer)
    choice = answer["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"] == f"Mail {EMAIL} now" == "".join(lp["tokens"])
    no_placeholder_text(lp["tokens"], lp["top_logprobs"])
    assert lp["top_logprobs"][1:6] == [{}] * 5 and lp["top_logprobs"][0] == {"Mail": -0.1, "x": -3.0}
    # every offset points at its token in the restored text
    for token, offset in zip(lp["tokens"], lp["text_offset"], strict=True):
        assert choice["text"][offset:offset + len(token)] == token
    assert lp["token_logprobs"] == [-0.1] * len(TOKENS)


def test_streamed_completions_offsets_run_on_across_chunks() -> None:
    filters = setup("completions")
    text, tokens, offsets, at = "", [], [], 100  # an echoed prompt of 100 characters came first
    for n, t in enumerate([*TOKENS, " again <EMAIL_1>"]):
        chunk = {"choices": [{"index": 0, "text": t, "finish_reason": "stop" if n == len(TOKENS) else None,
                              "logprobs": {"tokens": [t], "token_logprobs": [-0.1], "top_logprobs": [{t: -0.1}],
                                           "text_offset": [at]}}]}
        at += len(t)
        filters.filter_chunk(chunk)
        choice = chunk["choices"][0]
        text += choice["text"]
        tokens += choice["logprobs"]["tokens"]
        offsets += choice["logprobs"]["text_offset"]
    assert text == f"Mail {EMAIL} now again {EMAIL}" == "".join(tokens)
    assert offsets[0] == 100
    for token, offset in zip(tokens, offsets, strict=True):
        assert text[offset - 100:offset - 100 + len(token)] == token


def test_no_personal_data_leaves_logprobs_untouched() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    run(hook.on_request(c, chat("hello there")))
    filters = AnswerFilter("chat", lambda: FilterChain([hook.response_filter(c)]))
    entries = [chat_entry(t) for t in ["a <", "b>"]]
    answer = {"choices": [{"index": 0, "message": {"content": "a <b>"}, "logprobs": {"content": entries}}]}
    before = copy.deepcopy(answer)
    filters.filter_completion(answer)
    assert answer == before


def test_unknown_and_secret_placeholders_stay_as_written() -> None:
    restorer = TokenRestorer({"<EMAIL_1>": EMAIL})
    same = ["<AWS_ACCESS_KEY_1>", " and <EMAIL_2>"]
    assert restorer.feed(same, str, lambda e, t, s: t) + restorer.finish(str, lambda e, t, s: t) == same


def test_two_placeholders_in_one_token_and_one_over_many() -> None:
    restorer = TokenRestorer({"<EMAIL_1>": "a@b.io", "<PHONE_1>": "+1 212 555 0200"})
    rebuild = lambda e, t, s: (t, s)  # noqa: E731
    out = restorer.feed(["x<EMAIL_1>,<PHONE", "_1>y"], lambda e: e, rebuild)
    out += restorer.finish(lambda e: e, rebuild)
    assert out == [("xa@b.io,+1 212 555 0200", True), ("y", True)]
