"""Placeholders restored inside tool-call arguments (a JSON string) and in their escaped forms.

Through the real protection hook (request side: the value is found and replaced) and the gateway's
:class:`AnswerFilter` (answer side), whole and streamed, several choices and several tool calls each.
Attacks: values holding ``"``, ``\\``, a newline, a control character or a JSON fragment that would add
keys (``", "admin": true, "x": "``) must come back inside the arguments as that exact value, so
``json.loads(arguments)`` works and gives it back; placeholders the model wrote as
``\\u003cPERSON_1\\u003e`` (one JSON level), ``\\\\u003c..\\\\u003e`` (two) or ``&lt;..&gt;`` (HTML) are restored
in the same escaping; forms of placeholders the request never issued, and escaped backslashes
followed by the letters ``u003c``, stay as written. Every attack test failed on the tree before this
change (``5f18e3c``).
"""

from __future__ import annotations

import copy
import html
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kvfence.gateway.answer.filter import AnswerFilter, FilterChain
from kvfence.gateway.hooks import RequestContext
from kvfence.gateway.policy.tenants import GatewayTenant
from kvfence.gateway.protection.hook import ProtectionHook
from tests.gateway.protection.codename_hooks import make_hook
from tests.gateway.protection.test_hook import CLASSES, Incidents, make_policy, run

EMAIL = "ann@acme.io"
PHONE = "(415) 555-0132"
HOSTILE = [
    'Jo "JJ" O\'Brien',
    "C:\\Users\\jo\\",
    "line one\nline two\tand a bell \x07",
    '", "admin": true, "x": "',
    '"}], "evil": {"a": "',
    "\\u003cPHONE_7\\u003e \\\" \\n",  # a value that itself looks escaped (never restored twice)
    "Zoë \u2028 Ω",
]


def ctx(org: str = "acme", stream: bool = False) -> RequestContext:
    tenant = GatewayTenant(name=f"{org}-key", organization=org, workspace="default", default_class="public")
    return RequestContext(request_id=f"req-{org}-{time.monotonic_ns()}", tenant=tenant, data_class="public",
                          backend=None, endpoint="chat", class_order=CLASSES, stream=stream)


def request(value: str, *, org: str = "acme", stream: bool = False,
            extra: str = "") -> tuple[ProtectionHook, RequestContext, str]:
    """Send ``value`` (as a codename), an e-mail and a phone number: (hook, context, content as sent)."""
    hook = make_hook(make_policy(), incidents=Incidents())
    c = ctx(org, stream)
    content = f"Book for ⟦{value}⟧, mail {EMAIL}, call {PHONE}.{extra}"
    out = run(hook.on_request(c, {"model": "m", "messages": [{"role": "user", "content": content}]}))
    sent = out["messages"][0]["content"]
    assert value not in sent and EMAIL not in sent, sent
    return hook, c, sent


def answer_filter(hook: ProtectionHook, c: RequestContext) -> AnswerFilter:
    return AnswerFilter("chat", lambda: FilterChain([hook.response_filter(c)]))


def go_style(arguments: str) -> str:
    """JSON as Go's encoder (and many models) write it: ``<`` and ``>`` as ``\\u003c`` / ``\\u003e``."""
    return arguments.replace("<", "\\u003c").replace(">", "\\u003e")


def tool_calls(value: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Arguments as the model writes them (placeholders) and what the caller must get back, per call."""
    written = {"name": "<PERSON_1>", "to": "<EMAIL_1>", "note": "call <PHONE_1>, ask for <PERSON_1>",
               "nested": {"list": ["<PERSON_1>", "<EMAIL_1><PHONE_1>"]}}
    meant = {"name": value, "to": EMAIL, "note": f"call {PHONE}, ask for {value}",
             "nested": {"list": [value, f"{EMAIL}{PHONE}"]}}
    plain = json.dumps(written)
    return [plain, go_style(plain), json.dumps(written, indent=1)], [meant, meant, meant]


def whole_answer(arguments: list[str], choices: int = 2) -> dict[str, Any]:
    return {"object": "chat.completion", "choices": [
        {"index": n, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}_{i}", "type": "function", "function": {"name": "book", "arguments": a}}
            for i, a in enumerate(arguments)]}}
        for n in range(choices)]}


def stream_chunks(arguments: list[str], cuts: list[int], choices: int = 2) -> Iterator[dict[str, Any]]:
    """The arguments streamed with every call's text cut at ``cuts``, the calls and choices interleaved."""
    for n in range(choices):
        yield {"choices": [{"index": n, "delta": {"role": "assistant", "tool_calls": [
            {"index": i, "id": f"call_{n}_{i}", "type": "function", "function": {"name": "book", "arguments": ""}}
            for i in range(len(arguments))]}, "finish_reason": None}]}
    bounds = [0, *cuts]
    for k in range(len(bounds)):
        for n in range(choices):
            for i, a in enumerate(arguments):
                piece = a[bounds[k]:bounds[k + 1]] if k + 1 < len(bounds) else a[bounds[k]:]
                if piece:
                    yield {"choices": [{"index": n, "delta": {"tool_calls": [
                        {"index": i, "function": {"arguments": piece}}]}, "finish_reason": None}]}
    for n in range(choices):
        yield {"choices": [{"index": n, "delta": {}, "finish_reason": "tool_calls"}]}


def streamed_arguments(answer: AnswerFilter, chunks: Iterator[dict[str, Any]]) -> dict[tuple[int, int], str]:
    out = [answer.filter_chunk(chunk) for chunk in chunks] + answer.flush()
    joined: dict[tuple[int, int], str] = {}
    for chunk in out:
        for choice in chunk["choices"]:
            for call in choice.get("delta", {}).get("tool_calls") or []:
                key = (choice["index"], call["index"])
                joined[key] = joined.get(key, "") + (call.get("function", {}).get("arguments") or "")
    return joined


@pytest.mark.parametrize("value", HOSTILE)
def test_whole_answer_arguments_get_json_escaped_values(value: str) -> None:
    hook, c, _ = request(value)
    arguments, meant = tool_calls(value)
    body = answer_filter(hook, c).filter_completion(whole_answer(arguments))
    for choice in body["choices"]:
        got = [json.loads(call["function"]["arguments"]) for call in choice["message"]["tool_calls"]]
        assert got == meant


@pytest.mark.parametrize("value", HOSTILE)
def test_streamed_arguments_split_at_every_offset_get_json_escaped_values(value: str) -> None:
    hook, c, _ = request(value, stream=True)
    arguments, meant = tool_calls(value)
    arguments = arguments[:2]  # the indented copy adds nothing to the split test but length
    longest = max(map(len, arguments))
    for cut in range(1, longest):
        joined = streamed_arguments(answer_filter(hook, c), stream_chunks(arguments, [cut]))
        assert {k: json.loads(v) for k, v in joined.items()} == \
            {(n, i): meant[i] for n in range(2) for i in range(len(arguments))}, cut


@pytest.mark.parametrize("value", HOSTILE[:4])
def test_streamed_arguments_one_character_per_chunk(value: str) -> None:
    hook, c, _ = request(value, stream=True)
    arguments, meant = tool_calls(value)
    joined = streamed_arguments(answer_filter(hook, c), stream_chunks(arguments, list(range(1, 400))))
    assert {k: json.loads(v) for k, v in joined.items()} == {(n, i): meant[i] for n in range(2) for i in range(3)}


def test_a_structural_injection_adds_no_key() -> None:
    value = '", "admin": true, "x": "'
    hook, c, _ = request(value)
    body = answer_filter(hook, c).filter_completion(whole_answer(['{"user": "<PERSON_1>"}'], choices=1))
    parsed = json.loads(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    assert parsed == {"user": value} and "admin" not in parsed


def test_content_keeps_plain_values() -> None:
    value = 'Jo "JJ"\nO\'Brien \\ x'
    hook, c, _ = request(value)
    body = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {
        "role": "assistant", "content": "Booked for <PERSON_1> (<EMAIL_1>)."}}]})
    assert body["choices"][0]["message"]["content"] == f"Booked for {value} ({EMAIL})."


ESCAPED_FORMS = [
    # (as the model writes it inside the arguments' JSON, what json.loads must give back)
    ('{"a": "\\u003cPERSON_1\\u003e"}', lambda v: {"a": v}),
    ('{"a": "\\u003CPERSON_1\\u003E"}', lambda v: {"a": v}),  # upper-case hex digits
    ('{"a": "\\u003cPERSON_1>"}', lambda v: {"a": v}),
    ('{"a": "<PERSON_1\\u003e"}', lambda v: {"a": v}),
    ('{"a": "x\\\\\\u003cPERSON_1\\u003e"}', lambda v: {"a": "x\\" + v}),  # an escaped backslash, then the form
    # a JSON document inside a JSON string: two levels of escaping, one decode gives the inner JSON
    ('{"payload": "{\\"a\\": \\"\\\\u003cPERSON_1\\\\u003e\\"}"}', lambda v: {"payload": json.dumps({"a": v})}),
    ('{"html": "<p>&lt;PERSON_1&gt;</p>"}', lambda v: {"html": f"<p>{html.escape(v)}</p>"}),
    ('{"html": "<p>&#60;PERSON_1&#62;</p>"}', lambda v: {"html": f"<p>{html.escape(v)}</p>"}),
]


@pytest.mark.parametrize(("written", "meant"), ESCAPED_FORMS)
@pytest.mark.parametrize("value", ['Jo "JJ" \\ O\nBrien', "plain name"])
def test_escaped_placeholders_in_arguments_are_restored(written: str, meant: Any, value: str) -> None:
    hook, c, _ = request(value, stream=True)
    whole = answer_filter(hook, c).filter_completion(whole_answer([written], choices=1))
    assert json.loads(whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == meant(value)
    for cut in range(1, len(written)):
        joined = streamed_arguments(answer_filter(hook, c), stream_chunks([written], [cut], choices=1))
        assert json.loads(joined[(0, 0)]) == meant(value), cut


LEFT_AS_WRITTEN = [
    '{"a": "\\u003cPERSON_9\\u003e"}',           # never issued
    '{"a": "\\u003cperson_1\\u003e"}',           # mangled
    '{"a": "\\u003cPERSON_01\\u003e"}',
    '{"a": "\\\\\\\\u003cPERSON_1\\\\\\\\u003e"}',  # escaped backslashes + the letters u003c
    '{"a": "\\u003cPERSON_1&gt;"}',              # mixed JSON and HTML escaping
    '{"a": "&lt;PERSON_1\\u003e"}',
    '{"a": "\\u003cPERSON_1\\\\u003e"}',         # two levels on one side, one on the other
    '{"a": "&lt;AWS_ACCESS_KEY_1&gt; \\u003cAWS_ACCESS_KEY_1\\u003e"}',  # a secret's: never restored
]


@pytest.mark.parametrize("written", LEFT_AS_WRITTEN)
def test_unknown_or_inconsistent_forms_stay_as_written(written: str) -> None:
    hook, c, sent = request("Jo Doe", extra=" key AKIAIOSFODNN7EXAMPLE")
    assert "<AWS_ACCESS_KEY_1>" in sent
    whole = answer_filter(hook, c).filter_completion(whole_answer([written], choices=1))
    assert whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == written
    joined = streamed_arguments(answer_filter(hook, c), stream_chunks([written], list(range(1, len(written))), 1))
    assert joined[(0, 0)] == written


def test_escaped_placeholders_in_content() -> None:
    value = 'Jo "JJ" <b>O\'Brien</b>'
    hook, c, _ = request(value)
    content = ('JSON: {"name": "\\u003cPERSON_1\\u003e"} HTML: <td>&lt;PERSON_1&gt;</td> '
               'text: <PERSON_1> unknown: \\u003cPERSON_2\\u003e &lt;EMAIL_7&gt;')
    body = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {"content": content}}]})
    got = body["choices"][0]["message"]["content"]
    assert got == (f'JSON: {{"name": "{json.dumps(value)[1:-1]}"}} HTML: <td>{html.escape(value)}</td> '
                   f"text: {value} unknown: \\u003cPERSON_2\\u003e &lt;EMAIL_7&gt;")
    assert json.loads(got[got.index("{"):got.index("}") + 1]) == {"name": value}


def test_a_placeholder_the_caller_typed_escaped_is_never_issued() -> None:
    # the caller pastes JSON holding "\u003cEMAIL_1\u003e" and gives an address: that one is <EMAIL_2>
    hook, c, sent = request("Jo", extra=' Template: {"to": "\\u003cEMAIL_1\\u003e", "bcc": "&lt;PHONE_1&gt;"}')
    assert "<EMAIL_2>" in sent and "<EMAIL_1>" not in sent and "<PHONE_2>" in sent
    written = '{"to": "\\u003cEMAIL_1\\u003e", "cc": "\\u003cEMAIL_2\\u003e", "bcc": "&lt;PHONE_1&gt;"}'
    whole = answer_filter(hook, c).filter_completion(whole_answer([written], choices=1))
    assert json.loads(whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == \
        {"to": "<EMAIL_1>", "cc": EMAIL, "bcc": "&lt;PHONE_1&gt;"}


def test_restoration_stays_per_request() -> None:
    # two tenants' answers filtered side by side, chunk by chunk: each gets only its own values
    hook_a, a, _ = request('A "alpha"', org="acme", stream=True)
    hook_b = make_hook(make_policy(), incidents=Incidents())
    b = ctx("globex", stream=True)
    run(hook_b.on_request(b, {"model": "m", "messages": [{"role": "user", "content": "mail bo@globex.io"}]}))
    written = '{"p": "\\u003cPERSON_1\\u003e", "e": "<EMAIL_1>"}'
    fa, fb = answer_filter(hook_a, a), answer_filter(hook_b, b)
    chunks_a = list(stream_chunks([written], list(range(1, len(written))), 1))
    chunks_b = copy.deepcopy(chunks_a)
    out_a, out_b = [], []
    for ca, cb in zip(chunks_a, chunks_b, strict=True):
        out_a.append(fa.filter_chunk(ca))
        out_b.append(fb.filter_chunk(cb))
    args_a = "".join(call["function"].get("arguments") or "" for ch in out_a for choice in ch["choices"]
                     for call in choice.get("delta", {}).get("tool_calls") or [])
    args_b = "".join(call["function"].get("arguments") or "" for ch in out_b for choice in ch["choices"]
                     for call in choice.get("delta", {}).get("tool_calls") or [])
    assert json.loads(args_a) == {"p": 'A "alpha"', "e": EMAIL}
    assert json.loads(args_b) == {"p": "<PERSON_1>", "e": "bo@globex.io"}


def test_legacy_function_call_arguments_are_restored_escaped() -> None:
    value = '", "admin": true, "x": "'
    hook, c, _ = request(value, stream=True)
    written = '{"who": "<PERSON_1>", "mail": "\\u003cEMAIL_1\\u003e"}'
    whole = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {
        "content": None, "function_call": {"name": "book", "arguments": written}}}]})
    assert json.loads(whole["choices"][0]["message"]["function_call"]["arguments"]) == {"who": value, "mail": EMAIL}
    f = answer_filter(hook, c)
    out = [f.filter_chunk({"choices": [{"index": 0, "delta": {"function_call": {"arguments": written[i:i + 2]}},
                                        "finish_reason": None}]}) for i in range(0, len(written), 2)]
    out.append(f.filter_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "function_call"}]}))
    joined = "".join(choice["delta"].get("function_call", {}).get("arguments") or ""
                     for chunk in out for choice in chunk["choices"])
    assert json.loads(joined) == {"who": value, "mail": EMAIL}


def test_truncated_arguments_without_finish_reason_are_flushed_as_written() -> None:
    # a model cut off mid-placeholder and a stream that ends without finish_reason: the held-back
    # part comes out in flush(), as the model wrote it (half a placeholder is nobody's value)
    hook, c, _ = request('Jo "JJ"', stream=True)
    written = '{"a": "<PERSON_1>", "b": "\\u003cPERSON_1'
    f = answer_filter(hook, c)
    out = [f.filter_chunk({"choices": [{"index": 1, "delta": {"tool_calls": [
        {"index": 3, "function": {"arguments": written[i:i + 5]}}]}, "finish_reason": None}]})
        for i in range(0, len(written), 5)]
    out += f.flush()
    joined = "".join(call["function"].get("arguments") or "" for chunk in out for choice in chunk["choices"]
                     for call in choice.get("delta", {}).get("tool_calls") or [] if call["index"] == 3)
    assert joined == '{"a": "Jo \\"JJ\\"", "b": "\\u003cPERSON_1'


def test_sse_bytes_cut_at_every_offset() -> None:
    # the answer as it arrives on the wire (server-sent events, UTF-8), cut in two at every byte:
    # events are put together again before the filter sees them, and the arguments parse
    from kvfence.openai_wire import SSEDecoder, encode_event, event_data

    value = 'Zoë "Ω" \\ \n'
    hook, c, _ = request(value, stream=True)
    written = '{"a": "é <PERSON_1> ü", "b": "\\u003cPERSON_1\\u003e"}'
    raw = b"".join(encode_event(chunk) for chunk in stream_chunks([written], [9, 10, 11, 30, 31], choices=1))
    for cut in range(1, len(raw)):
        decoder, f = SSEDecoder(), answer_filter(hook, c)
        out = []
        for part in (raw[:cut], raw[cut:]):
            for event in decoder.feed(part):
                data = event_data(event)
                assert data is not None
                out.append(f.filter_chunk(json.loads(data)))
        out += f.flush()
        joined = "".join(call["function"].get("arguments") or "" for chunk in out for choice in chunk["choices"]
                         for call in choice.get("delta", {}).get("tool_calls") or [])
        assert json.loads(joined) == {"a": f"é {value} ü", "b": value}, cut
