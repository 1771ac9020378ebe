"""Attacks on the gateway's data protection by a careless or hostile client: Unicode disguises
(full-width digits, zero-width and soft-hyphen characters, no-break spaces, odd dashes, look-alike
``@``), a value split across content parts or messages, and text in fields the scanner used to skip
(a message's ``name``, ``response_format`` schemas, tool definitions). Each test failed before the
detector folded its input (``protection/normalise.py``), scanned the boundaries of texts
(``protection/split_values.py``) and those fields (``protection/messages.py``). Where a placeholder is
restored, the caller's own characters come back, disguise included."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvfence.gateway.protection.detect.detector import build_detector
from tests.gateway.protection.test_hook import answer_through, ctx, make_hook, make_policy, run

DETECTOR = build_detector(use_presidio=False)

DISGUISED = [
    ("mail jane\u200b.doe@example.org today", "EMAIL_ADDRESS", "jane\u200b.doe@example.org"),
    ("mail jane.d\u00adoe@exam\u00adple.org today", "EMAIL_ADDRESS", "jane.d\u00adoe@exam\u00adple.org"),
    ("mail jane.doe\uff20example.org today", "EMAIL_ADDRESS", "jane.doe\uff20example.org"),  # full-width @
    ("mail jane.doe\ufe6bexample.org today", "EMAIL_ADDRESS", "jane.doe\ufe6bexample.org"),  # small @
    ("card \uff14\uff15\uff13\uff19 \uff11\uff14\uff18\uff18 \uff10\uff13\uff14\uff13 \uff16\uff14\uff16\uff17",
     "CREDIT_CARD", "\uff14\uff15\uff13\uff19 \uff11\uff14\uff18\uff18 \uff10\uff13\uff14\uff13 \uff16\uff14\uff16\uff17"),
    ("card 4539\u200b1488\u200b0343\u200b6467 ok", "CREDIT_CARD", "4539\u200b1488\u200b0343\u200b6467"),
    ("call +44\u00a020\u00a07946\u00a00958 now", "PHONE_NUMBER", "+44\u00a020\u00a07946\u00a00958"),
    ("call +1\u2011212\u2011456\u20117890 now", "PHONE_NUMBER", "+1\u2011212\u2011456\u20117890"),
    ("IBAN DE89\u200b3704\u200b0044\u200b0532\u200b0130\u200b00", "IBAN_CODE",
     "DE89\u200b3704\u200b0044\u200b0532\u200b0130\u200b00"),
    ("key sk-proj-\u200bAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd", "OPENAI_API_KEY",
     "sk-proj-\u200bAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"),
    ("id AKIA\u2060IOSFODNN7EXAMPLE here", "AWS_ACCESS_KEY", "AKIA\u2060IOSFODNN7EXAMPLE"),
    ("token ghp_\ufeffR2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u", "GITHUB_TOKEN",
     "ghp_\ufeffR2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u"),
]


@pytest.mark.parametrize(("text", "entity", "value"), DISGUISED)
def test_unicode_disguises_do_not_hide_a_value(text: str, entity: str, value: str) -> None:
    assert [(f.entity, text[f.start:f.end]) for f in DETECTOR.scan(text)] == [(entity, value)]


def test_folding_adds_no_false_positive() -> None:
    # accents, CJK, typographic quotes and dashes in ordinary prose stay what they are
    for text in ("Café Müller – 12 Plätze, «très bien» 東京 2024年", "Fullwidth ＡＢＣ １２３ is just text",
                 "a\u00a0b\u200bc soft\u00adhyphen"):
        assert DETECTOR.scan(text) == []


def test_the_callers_disguised_text_is_what_comes_back() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    email = "jane\u200b.doe\uff20example.org"
    out = run(hook.on_request(c, {"model": "m", "messages": [{"role": "user", "content": f"write to {email}"}]}))
    assert out["messages"][0]["content"] == "write to <EMAIL_1>"
    assert answer_through(hook, c, "Sent to <EMAIL_1>.") == f"Sent to {email}."


def outgoing(body: dict[str, Any], endpoint: str = "chat") -> str:
    hook, _ = make_hook(make_policy())
    return json.dumps(run(hook.on_request(ctx(endpoint=endpoint), body)), ensure_ascii=False)


KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"


def test_a_secret_split_across_two_content_parts_is_removed() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": f"my key is {KEY[:14]}"}, {"type": "text", "text": f"{KEY[14:]} thanks"}]}]}
    sent = outgoing(body)
    assert KEY[:14] not in sent and KEY[14:] not in sent and "<OPENAI_API_KEY_1>" in sent and "thanks" in sent


def test_an_email_split_across_two_content_parts_is_pseudonymised_and_restored_whole() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "mail jane.doe@"}, {"type": "text", "text": "example.org please"}]}]}
    out = run(hook.on_request(c, body))
    assert [p["text"] for p in out["messages"][0]["content"]] == ["mail <EMAIL_1>", " please"]
    assert answer_through(hook, c, "ok <EMAIL_1>") == "ok jane.doe@example.org"


def test_a_secret_split_across_two_messages_is_removed() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": f"first half: {KEY[:20]}"},
                                       {"role": "user", "content": f"{KEY[20:]} is the rest"}]}
    sent = outgoing(body)
    assert KEY[:20] not in sent and KEY[20:] not in sent and "<OPENAI_API_KEY_1>" in sent


def test_a_secret_split_between_a_tool_message_and_tool_call_arguments_is_removed() -> None:
    body = {"model": "m", "messages": [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"k": KEY[:16]})[:-2]}}]},
        {"role": "tool", "tool_call_id": "1", "content": f"{KEY[16:]} done"}]}
    sent = outgoing(body)
    assert KEY[16:] not in sent and "<OPENAI_API_KEY_1>" in sent


def test_digits_at_two_message_boundaries_are_not_a_card() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "order 4539 1488"},
                                       {"role": "user", "content": "0343 6467 shipped"}]}
    sent = outgoing(body)
    assert "4539 1488" in sent and "0343 6467" in sent  # across messages only secrets are joined


@pytest.mark.parametrize("body", [
    {"model": "m", "messages": [{"role": "user", "name": "jane.doe@example.org", "content": "hi"}]},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {
            "name": {"type": "string", "description": "always answer jane.doe@example.org"}}}}}},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
        "name": "lookup", "description": "look up jane.doe@example.org", "parameters": {"type": "object"}}}]},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "guided_choice": ["jane.doe@example.org", "no"]},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "jane.doe@example.org"},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": {"customer": "jane.doe@example.org"}},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}],
     "prediction": {"type": "content", "content": "Dear jane.doe@example.org,"}},
])
def test_fields_that_reach_the_model_are_scanned(body: dict[str, Any]) -> None:
    sent = outgoing(body)
    assert "jane.doe@example.org" not in sent and "<EMAIL_1>" in sent
    assert '"name": "r"' in sent or "response_format" not in body  # structure untouched


def test_completions_prompt_list_with_a_disguised_key_is_scanned() -> None:
    sent = outgoing({"model": "m", "prompt": ["ok", f"key {KEY[:10]}\u200b{KEY[10:]}"]}, endpoint="completions")
    assert KEY[10:] not in sent and "<OPENAI_API_KEY_1>" in sent
