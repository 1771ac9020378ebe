"""Attacks on the answer side of the gateway's data protection: another tenant's prompt coming back
disguised (case, whitespace, zero-width characters, full-width letters, split across stream chunks),
and a model that writes placeholders it was never given (they must not turn into another request's
or another tenant's personal data: the restore table is per request)."""

from __future__ import annotations

import pytest

from kvfence.gateway.errors import LeakSuspected
from tests.gateway.protection.test_hook import answer_through, chat, ctx, make_hook, make_policy, run

VICTIM = ("Board minutes: we will lay off the entire Rotterdam warehouse team of forty people "
          "in the second week of January and announce it after the holidays.")


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text)


@pytest.mark.parametrize("disguise", [
    pytest.param(lambda t: t.upper(), id="upper-case"),
    pytest.param(lambda t: "  \n ".join(t.split(" ")), id="whitespace"),
    pytest.param(lambda t: " ".join(w[:2] + "\u200b" + w[2:] if len(w) > 3 else w for w in t.split(" ")),
                 id="zero-width-inside-words"),
    pytest.param(lambda t: " ".join(w[:1] + "\u00ad" + w[1:] for w in t.split(" ")), id="soft-hyphens"),
    pytest.param(_fullwidth, id="full-width"),
])
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_a_disguised_copy_of_another_tenants_prompt_is_withheld(disguise, chunk: int) -> None:  # type: ignore[no-untyped-def]
    hook, incidents = make_hook(make_policy())
    run(hook.on_request(ctx("acme"), chat(VICTIM)))
    c = ctx("globex", stream=True)
    run(hook.on_request(c, chat("Write a haiku about autumn")))
    leaked = "Leaves fall. " + disguise(VICTIM)
    with pytest.raises(LeakSuspected):
        answer_through(hook, c, leaked, chunk=chunk)
    assert incidents.rows and incidents.rows[0]["tenants"] == ["globex", "acme"]


def test_the_asker_quoting_its_own_disguised_prompt_is_no_leak() -> None:
    hook, incidents = make_hook(make_policy())
    run(hook.on_request(ctx("acme"), chat(VICTIM)))
    c = ctx("acme", stream=True)
    run(hook.on_request(c, chat(VICTIM)))
    assert answer_through(hook, c, VICTIM.upper(), chunk=5) == VICTIM.upper()
    assert not incidents.rows


def test_an_invented_placeholder_maps_to_nothing() -> None:
    hook, _ = make_hook(make_policy())
    a = ctx("acme")
    run(hook.on_request(a, chat("mail ann@acme.io or bo@acme.io, call +44 20 7946 0958")))
    b = ctx("globex")
    run(hook.on_request(b, chat("mail zed@globex.io")))
    # b was given <EMAIL_1> only: the others are a's numbering, or never issued at all
    assert answer_through(hook, b, "to <EMAIL_1>, <EMAIL_2>, <PHONE_1>, <EMAIL_9>") == \
        "to zed@globex.io, <EMAIL_2>, <PHONE_1>, <EMAIL_9>"
    # the same tenant's next request starts a fresh table
    a2 = ctx("acme")
    run(hook.on_request(a2, chat("hello again")))
    assert answer_through(hook, a2, "<EMAIL_1> <PHONE_1>") == "<EMAIL_1> <PHONE_1>"
    assert answer_through(hook, a, "<EMAIL_2> <PHONE_1>") == "bo@acme.io +44 20 7946 0958"


def test_a_placeholder_split_across_one_character_chunks_is_restored() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx("acme", stream=True)
    run(hook.on_request(c, chat("mail ann@acme.io")))
    assert answer_through(hook, c, "Write to <EMAIL_1>, not <EMAIL_1x>.", chunk=1) == \
        "Write to ann@acme.io, not <EMAIL_1x>."


def test_placeholders_in_streamed_tool_call_arguments_are_restored_across_chunks() -> None:
    from kvfence.gateway.answer.filter import AnswerFilter, FilterChain

    hook, _ = make_hook(make_policy())
    c = ctx("acme", stream=True)
    run(hook.on_request(c, chat("mail ann@acme.io")))
    answer = AnswerFilter("chat", lambda: FilterChain([hook.response_filter(c)]))
    arguments = '{"to": "<EMAIL_1>", "cc": "<EMAIL_7>"}'
    out = []
    for i in range(0, len(arguments), 4):  # the placeholder is split over several chunks
        chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": arguments[i:i + 4]}}]}, "finish_reason": None}]}
        out.append(answer.filter_chunk(chunk))
    out.append(answer.filter_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
    out += answer.flush()
    sent = "".join(call["function"].get("arguments") or "" for chunk in out for choice in chunk["choices"]
                   for call in choice.get("delta", {}).get("tool_calls") or [])
    assert sent == '{"to": "ann@acme.io", "cc": "<EMAIL_7>"}'
