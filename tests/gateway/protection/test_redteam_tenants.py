"""A hostile tenant against the pseudonymiser and its restoration (second red-team pass).

Marked *guard* where the attack already failed on the tree before this pass (``2d53f85``); the
others failed there: digits of another script hid a card number and an IP address from every rule
(a model reads ``٤٥٣٩`` as 4539), an e-mail escaped inside tool-call JSON (``\\u0040``, ``&#64;``) was
sent as is, and a key hidden three ways at once (look-alike letter, escape, three content parts) too."""

from __future__ import annotations

import json

import pytest

from kvfence.gateway.protection.detect.detector import build_detector
from tests.gateway.protection.test_hook import answer_through, ctx, make_hook, make_policy, run

DETECTOR = build_detector(use_presidio=False)


def _digits(text: str, zero: int) -> str:
    return "".join(chr(zero + int(c)) if c.isdigit() else c for c in text)


@pytest.mark.parametrize("zero", [0x660, 0x6F0, 0x966, 0x9E6, 0xFF10])  # Arabic-Indic, Persian, Devanagari,
def test_digits_of_other_scripts_do_not_hide_a_number(zero: int) -> None:  # Bengali, full-width (guard)
    text = f"card {_digits('4539 1488 0343 6467', zero)}, server ip {_digits('8.8.4.4', zero)}"
    assert [f.entity for f in DETECTOR.scan(text)] == ["CREDIT_CARD", "IP_ADDRESS"]


def test_arabic_prose_with_its_own_digits_is_not_personal_data() -> None:
    assert DETECTOR.scan("السنة ٢٠٢٤ والسعر ١٥٠ ريال، الطابق ٣") == []


def test_two_tenants_interleaved_each_restore_only_their_own_values() -> None:  # guard
    hook, _ = make_hook(make_policy())
    a, b = ctx("acme", stream=True), ctx("globex", stream=True)
    run(hook.on_request(a, {"model": "m", "messages": [{"role": "user", "content": "I am ann@acme.io"}]}))
    run(hook.on_request(b, {"model": "m", "messages": [{"role": "user", "content": "I am bob@globex.com"}]}))
    fa, fb = hook.response_filter(a), hook.response_filter(b)
    answer = "Hello <EMAIL_1>, not <EMAIL_2>."
    out_a, out_b = [], []
    for ch in answer:  # both streams advance one character at a time, interleaved
        out_a.append(fa.feed(ch))
        out_b.append(fb.feed(ch))
    out_a.append(fa.finish())
    out_b.append(fb.finish())
    assert "".join(out_a) == "Hello ann@acme.io, not <EMAIL_2>."
    assert "".join(out_b) == "Hello bob@globex.com, not <EMAIL_2>."


def test_a_placeholder_typed_by_the_tenant_never_restores_to_a_value() -> None:  # guard
    hook, _ = make_hook(make_policy())
    c = ctx()
    out = run(hook.on_request(c, {"model": "m", "messages": [
        {"role": "user", "content": "repeat <EMAIL_1> and <EMAIL_2>; mine is bob@globex.com"}]}))
    assert out["messages"][0]["content"] == "repeat <EMAIL_1> and <EMAIL_2>; mine is <EMAIL_3>"
    assert answer_through(hook, c, "<EMAIL_1> <EMAIL_2> <EMAIL_3>", chunk=1) == "<EMAIL_1> <EMAIL_2> bob@globex.com"


def test_placeholders_the_model_invents_or_mangles_stay_as_written() -> None:  # guard
    hook, _ = make_hook(make_policy())
    c = ctx()
    run(hook.on_request(c, {"model": "m", "messages": [
        {"role": "user", "content": "ann@acme.io, key sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"}]}))
    text = "<EMAIL_7> <OPENAI_API_KEY_1> <EMAIL_1 > <email_1> <EMAIL_01>"
    assert answer_through(hook, c, text, chunk=1) == text


def test_a_json_escaped_email_in_tool_arguments_round_trips_through_a_streamed_tool_call() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx(stream=True)
    raw_args = '{"to": "ann\\u0040acme.io", "cc": "bob&#64;globex.com"}'
    out = run(hook.on_request(c, {"model": "m", "messages": [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "send", "arguments": raw_args}}]},
        {"role": "tool", "tool_call_id": "1", "content": "sent"}]}))
    sent_args = out["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent_args) == {"to": "<EMAIL_1>", "cc": "<EMAIL_2>"}
    # the model calls the tool again, its arguments streamed a few characters at a time
    restored = answer_through(hook, c, '{"to": "<EMAIL_1>", "cc": "<EMAIL_2>"}', chunk=3)
    assert json.loads(restored) == {"to": "ann@acme.io", "cc": "bob&#64;globex.com"}


def test_a_secret_hidden_three_ways_at_once_is_removed() -> None:
    # look-alike letter + JSON escape + split over three content parts
    key = "\u0455k-proj-AbCdEfGh\\u0049jKlMnOpQrStUvWxYz0123456789abcd"
    parts = [key[:12], key[12:30], key[30:] + " end"]
    hook, _ = make_hook(make_policy())
    out = run(hook.on_request(ctx(), {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": p} for p in parts]}]}))
    texts = [p["text"] for p in out["messages"][0]["content"]]
    assert texts == ["<OPENAI_API_KEY_1>", "", " end"]
