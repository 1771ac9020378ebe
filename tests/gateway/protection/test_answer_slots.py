"""Every answer field that carries model text is restored and leak-scanned, in its own syntax.

Attacks on the three gaps left after the tool-arguments work (64 of 75 failed on ``c637f5b``; the
others are guards: those marked so, a value that needs no JSON escaping, and the JSON cases the
model wrote already escaped, ``\\u003c..\\u003e``, which the form work restored escaped before):

- a custom tool call's free-text ``custom.input`` (and ``refusal``, ``audio.transcript``,
  ``reasoning``) went out unfiltered: another tenant's prompt or canary in it was not withheld, a
  placeholder in it not restored;
- ``content`` under a JSON ``response_format`` is a JSON document: a restored value holding ``"``,
  ``\\`` or a newline broke it or added keys;
- ``logprobs`` tokens restored only the plain ``<EMAIL_1>``, not ``\\u003cEMAIL_1\\u003e`` or
  ``&lt;EMAIL_1&gt;``, so the tokens and the content differed; and a token holding the end of one
  placeholder and the start of the next (``"EMAIL_1><"``) let the tokens before it go out alone,
  unrestored;
- on the request side, ``custom.input``, ``refusal`` and ``reasoning_content`` / ``reasoning`` of
  earlier assistant turns reached the backend unscanned.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest

from kvfence.gateway.answer.filter import AnswerFilter, FilterChain
from kvfence.gateway.errors import LeakSuspected
from kvfence.gateway.protection.hook import ProtectionHook
from kvfence.gateway.protection.pseudonymise.token_restore import TokenRestorer
from tests.gateway.protection.test_hook import chat, ctx, make_hook, make_policy, run
from tests.gateway.protection.test_tool_arguments_restore import EMAIL, HOSTILE, PHONE, request

SECRET = ("Board minutes: we will lay off the entire Rotterdam warehouse team of forty people "
          "in the second week of January and announce it after the holidays.")


def answer_filter(hook: ProtectionHook, c: Any, endpoint: str = "chat") -> AnswerFilter:
    return AnswerFilter(endpoint, lambda: FilterChain([hook.response_filter(c)]))


def custom_call(index: int, text: str, *, stream: bool) -> dict[str, Any]:
    call: dict[str, Any] = {"id": f"call_{index}", "type": "custom", "custom": {"name": "shell", "input": text}}
    return {"index": index, **call} if stream else call


def whole_custom(inputs: list[str], choices: int = 2) -> dict[str, Any]:
    return {"object": "chat.completion", "choices": [
        {"index": n, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [custom_call(i, text, stream=False) for i, text in enumerate(inputs)]}}
        for n in range(choices)]}


def streamed_custom(inputs: list[str], cuts: list[int], choices: int = 2) -> Iterator[dict[str, Any]]:
    """Each input cut at ``cuts``; calls and choices interleaved, as the tools-backend streams them."""
    for n in range(choices):
        yield {"choices": [{"index": n, "finish_reason": None, "delta": {
            "role": "assistant", "tool_calls": [custom_call(i, "", stream=True) for i in range(len(inputs))]}}]}
    bounds = [0, *cuts, max(map(len, inputs))]
    for a, b in pairwise(bounds):
        for n in range(choices):
            for i, text in enumerate(inputs):
                if text[a:b]:
                    yield {"choices": [{"index": n, "finish_reason": None, "delta": {
                        "tool_calls": [{"index": i, "custom": {"input": text[a:b]}}]}}]}
    for n in range(choices):
        yield {"choices": [{"index": n, "delta": {}, "finish_reason": "tool_calls"}]}


def joined_custom(f: AnswerFilter, chunks: Iterator[dict[str, Any]]) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for chunk in [*(f.filter_chunk(c) for c in chunks), *f.flush()]:
        for choice in chunk["choices"]:
            for call in choice.get("delta", {}).get("tool_calls") or []:
                key = (choice["index"], call["index"])
                out[key] = out.get(key, "") + ((call.get("custom") or {}).get("input") or "")
    return out


# -- custom tool calls: restored as plain text -------------------------------------------------------

@pytest.mark.parametrize("value", HOSTILE[:4])
def test_custom_tool_input_is_restored_as_plain_text(value: str) -> None:
    hook, c, _ = request(value, stream=True)
    inputs = ["echo <PERSON_1> | mail <EMAIL_1>", "call <PHONE_1> for <PERSON_1>"]
    meant = [f"echo {value} | mail {EMAIL}", f"call {PHONE} for {value}"]
    body = answer_filter(hook, c).filter_completion(whole_custom(inputs))
    for choice in body["choices"]:
        assert [call["custom"]["input"] for call in choice["message"]["tool_calls"]] == meant
        assert [call["custom"]["name"] for call in choice["message"]["tool_calls"]] == ["shell", "shell"]
    for cut in range(1, max(map(len, inputs))):
        got = joined_custom(answer_filter(hook, c), streamed_custom(inputs, [cut]))
        assert got == {(n, i): meant[i] for n in range(2) for i in range(2)}, cut
    got = joined_custom(answer_filter(hook, c), streamed_custom(inputs, list(range(1, 60))))
    assert got == {(n, i): meant[i] for n in range(2) for i in range(2)}


def test_custom_and_function_calls_in_one_choice_keep_their_own_syntax() -> None:
    value = 'Jo "JJ" \\ O'
    hook, c, _ = request(value, stream=True)
    body = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {"tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"who": "<PERSON_1>"}'}},
        custom_call(1, "who: <PERSON_1>", stream=False)]}}]})
    calls = body["choices"][0]["message"]["tool_calls"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"who": value}
    assert calls[1]["custom"]["input"] == f"who: {value}"


def test_a_custom_input_cut_off_without_finish_reason_is_flushed() -> None:
    hook, c, _ = request("Jo", stream=True)
    f = answer_filter(hook, c)
    out = [f.filter_chunk({"choices": [{"index": 0, "finish_reason": None, "delta": {
        "tool_calls": [{"index": 3, "custom": {"input": text}}]}}]}) for text in ("to <PERS", "ON_1> <EMA")]
    out += f.flush()
    got = "".join((call.get("custom") or {}).get("input") or "" for chunk in out for choice in chunk["choices"]
                  for call in choice.get("delta", {}).get("tool_calls") or [] if call["index"] == 3)
    assert got == "to Jo <EMA"  # the held-back tail goes out as written, into the same call's input


# -- other text fields -------------------------------------------------------------------------------

def test_refusal_reasoning_and_audio_transcript_are_restored() -> None:
    hook, c, _ = request("Jo Doe", stream=True)
    body = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {
        "content": None, "refusal": "I cannot mail <EMAIL_1>.", "reasoning": "<PERSON_1> asked",
        "audio": {"id": "a1", "data": "UklGRg==", "expires_at": 1, "transcript": "Hello <PERSON_1>"}}}]})
    message = body["choices"][0]["message"]
    assert message["refusal"] == f"I cannot mail {EMAIL}."
    assert message["reasoning"] == "Jo Doe asked"
    assert message["audio"] == {"id": "a1", "data": "UklGRg==", "expires_at": 1, "transcript": "Hello Jo Doe"}
    f = answer_filter(hook, c)
    text = "Hello <PERSON_1>, at <EMAIL_1>"
    out = [f.filter_chunk({"choices": [{"index": 0, "finish_reason": None, "delta": {
        "refusal": text[i:i + 2], "audio": {"transcript": text[i:i + 2]}}}]}) for i in range(0, len(text), 2)]
    out += f.flush()
    refusal = "".join(ch["choices"][0]["delta"].get("refusal") or "" for ch in out)
    transcript = "".join((ch["choices"][0]["delta"].get("audio") or {}).get("transcript") or "" for ch in out)
    assert refusal == transcript == f"Hello Jo Doe, at {EMAIL}"


# -- leak detection in every field -------------------------------------------------------------------

def leak_setup(protection: dict[str, Any] | None = None) -> tuple[ProtectionHook, Any, Any, str]:
    """acme sent SECRET (and got a canary); globex asks next: (hook, incidents, globex's ctx, acme's canary)."""
    hook, incidents = make_hook(make_policy(protection or {"leak": {"canaries": True}}))
    out = run(hook.on_request(ctx("acme"), {"model": "m", "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": SECRET}]}))
    canary = next(w for w in out["messages"][0]["content"].split() if w.startswith("kvfc-"))
    b = ctx("globex", stream=True)
    run(hook.on_request(b, chat("Write a haiku about autumn")))
    return hook, incidents, b, canary


@pytest.mark.parametrize("what", ["secret", "canary"])
def test_another_tenants_text_in_a_whole_custom_input_is_withheld(what: str) -> None:
    hook, incidents, b, canary = leak_setup()
    leaked = SECRET if what == "secret" else f"cat /etc/motd # {canary}"
    with pytest.raises(LeakSuspected):
        answer_filter(hook, b).filter_completion(whole_custom(["ls -la", leaked], choices=1))
    assert incidents.rows[-1]["kind"] == "cross_tenant_leak"
    assert incidents.rows[-1]["details"]["detector"] == ("ngram" if what == "secret" else "canary")
    assert incidents.rows[-1]["tenants"] == ["globex", "acme"]


@pytest.mark.parametrize("what", ["secret", "canary"])
def test_another_tenants_text_in_a_streamed_custom_input_is_withheld(what: str) -> None:
    hook, incidents, b, canary = leak_setup()
    leaked = SECRET if what == "secret" else f"echo {canary} done"
    f = answer_filter(hook, b)
    emitted = []
    with pytest.raises(LeakSuspected):
        for chunk in streamed_custom(["pwd", leaked], [*range(4, len(leaked), 4)], choices=2):
            emitted.append(json.dumps(f.filter_chunk(chunk)))
        f.flush()
    assert incidents.rows and incidents.rows[-1]["details"]["detector"] == ("ngram" if what == "secret" else "canary")
    if what == "canary":
        assert canary not in "".join(emitted)
    else:
        assert not ("Rotterdam" in "".join(emitted) and "January" in "".join(emitted))


@pytest.mark.parametrize("field", ["refusal", "reasoning", "audio"])
def test_another_tenants_text_in_refusal_reasoning_or_transcript_is_withheld(field: str) -> None:
    hook, incidents, b, canary = leak_setup()
    text = f"Sorry. {SECRET} {canary}"
    message: dict[str, Any] = {"content": None}
    if field == "audio":
        message["audio"] = {"id": "a", "data": "", "expires_at": 1, "transcript": text}
    else:
        message[field] = text
    with pytest.raises(LeakSuspected):
        answer_filter(hook, b).filter_completion({"choices": [{"index": 0, "message": message}]})
    assert incidents.rows[-1]["kind"] == "cross_tenant_leak"


def test_own_text_in_a_custom_input_raises_nothing() -> None:  # guard
    hook, incidents, _, _ = leak_setup()
    a = ctx("acme", stream=True)
    run(hook.on_request(a, chat(SECRET)))
    body = answer_filter(hook, a).filter_completion(whole_custom([SECRET], choices=1))
    assert body["choices"][0]["message"]["tool_calls"][0]["custom"]["input"] == SECRET
    assert incidents.rows == []


# -- content under a JSON response_format ------------------------------------------------------------

JSON_FORMATS: list[dict[str, Any]] = [
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
    {"structured_outputs": {"json": {"type": "object"}}},
    {"guided_json": {"type": "object"}},
]


def json_request(value: str, fields: dict[str, Any], *, endpoint: str = "chat") -> tuple[ProtectionHook, Any]:
    from tests.gateway.protection.codename_hooks import make_hook as codename_hook
    from tests.gateway.protection.test_hook import Incidents

    hook = codename_hook(make_policy(), incidents=Incidents())
    c = ctx(endpoint=endpoint, stream=True)
    text = f"Book for ⟦{value}⟧, mail {EMAIL}, call {PHONE}."
    body = chat(text) if endpoint == "chat" else {"model": "m", "prompt": text}
    out = run(hook.on_request(c, {**body, **fields}))
    assert value not in json.dumps(out) and EMAIL not in json.dumps(out)
    return hook, c


def json_document() -> tuple[str, Any]:
    written = json.dumps({"name": "<PERSON_1>", "note": "call <PHONE_1> or write to <EMAIL_1>",
                          "list": ["<PERSON_1>", "<EMAIL_1><PHONE_1>"], "n": 3, "ok": True}, indent=1)
    return written, lambda v: {"name": v, "note": f"call {PHONE} or write to {EMAIL}",
                               "list": [v, f"{EMAIL}{PHONE}"], "n": 3, "ok": True}


def streamed_content(f: AnswerFilter, text: str, cuts: list[int], field: str = "content") -> str:
    bounds = [0, *cuts, len(text)]
    out = [f.filter_chunk({"choices": [{"index": 0, "finish_reason": None, "delta": {field: text[a:b]}}]})
           for a, b in pairwise(bounds) if text[a:b]]
    out.append(f.filter_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out += f.flush()
    return "".join(ch["choices"][0]["delta"].get(field) or "" for ch in out)


@pytest.mark.parametrize("fields", JSON_FORMATS)
@pytest.mark.parametrize("value", HOSTILE)
def test_json_content_gets_json_escaped_values(value: str, fields: dict[str, Any]) -> None:
    hook, c = json_request(value, fields)
    written, meant = json_document()
    body = answer_filter(hook, c).filter_completion({"choices": [
        {"index": n, "message": {"role": "assistant", "content": written}} for n in range(2)]})
    for choice in body["choices"]:
        parsed = json.loads(choice["message"]["content"])
        assert parsed == meant(value) and "admin" not in parsed and "evil" not in parsed


@pytest.mark.parametrize("value", HOSTILE)
def test_streamed_json_content_split_at_every_offset(value: str) -> None:
    hook, c = json_request(value, JSON_FORMATS[0])
    written, meant = json_document()
    for cut in range(1, len(written)):
        assert json.loads(streamed_content(answer_filter(hook, c), written, [cut])) == meant(value), cut
    one_each = streamed_content(answer_filter(hook, c), written, list(range(1, len(written))))
    assert json.loads(one_each) == meant(value)


def test_json_content_of_completions_text_is_restored_escaped() -> None:
    value = 'Jo "JJ" \\'
    hook, c = json_request(value, JSON_FORMATS[2], endpoint="completions")
    f = answer_filter(hook, c, "completions")
    body = f.filter_completion({"choices": [{"index": 0, "text": '{"a": "<PERSON_1>"}'}]})
    assert json.loads(body["choices"][0]["text"]) == {"a": value}


JSON_CASES = [
    # (content as the model writes it, what json.loads must give back for value v)
    ('{"a": "\\u003cPERSON_1\\u003e"}', lambda v: {"a": v}),
    ('{"a": "x\\\\\\u003cPERSON_1\\u003e"}', lambda v: {"a": "x\\" + v}),
    ('{"a": "\\"<PERSON_1>\\""}', lambda v: {"a": f'"{v}"'}),       # escaped quotes around it
    ('{"a\\"": "<PERSON_1>", "b": "\\\\"}', lambda v: {'a"': v, "b": "\\"}),
    ('{"payload": "{\\"a\\": \\"\\\\u003cPERSON_1\\\\u003e\\"}"}', lambda v: {"payload": json.dumps({"a": v})}),
    ('{"html": "<p>&lt;PERSON_1&gt;</p>"}', lambda v: {"html": "<p>" + v.replace("&", "&amp;").replace(
        "<", "&lt;").replace(">", "&gt;").replace('"', "&quot;").replace("'", "&#x27;") + "</p>"}),
    # unknown, mangled and never-issued placeholders stay as written (guards)
    ('{"a": "<PERSON_9>", "b": "<person_1>", "c": "\\u003cEMAIL_4\\u003e"}',
     lambda v: {"a": "<PERSON_9>", "b": "<person_1>", "c": "<EMAIL_4>"}),
]


@pytest.mark.parametrize(("written", "meant"), JSON_CASES)
def test_json_content_escaped_forms_and_unknown_placeholders(written: str, meant: Any) -> None:
    value = 'Jo "JJ" \\ O\nBrien'
    hook, c = json_request(value, JSON_FORMATS[0])
    whole = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {"content": written}}]})
    assert json.loads(whole["choices"][0]["message"]["content"]) == meant(value)
    for cut in range(1, len(written)):
        assert json.loads(streamed_content(answer_filter(hook, c), written, [cut])) == meant(value), cut


def test_placeholders_outside_json_strings_are_left_as_written() -> None:
    hook, c = json_request('a"b', JSON_FORMATS[0])
    written = 'Sure: {"a": "<PERSON_1>", <PERSON_1>: 1} <EMAIL_1>'
    out = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {"content": written}}]})
    assert out["choices"][0]["message"]["content"] == 'Sure: {"a": "a\\"b", <PERSON_1>: 1} <EMAIL_1>'
    for cut in range(1, len(written)):
        assert streamed_content(answer_filter(hook, c), written, [cut]) == \
            'Sure: {"a": "a\\"b", <PERSON_1>: 1} <EMAIL_1>', cut


def test_json_format_leaves_other_fields_and_plain_requests_as_prose() -> None:  # guard
    value = 'Jo "JJ"'
    hook, c = json_request(value, JSON_FORMATS[0])
    out = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {
        "content": '{"a": "<PERSON_1>"}', "reasoning_content": 'He is "<PERSON_1>"'}}]})
    assert out["choices"][0]["message"]["reasoning_content"] == f'He is "{value}"'
    hook, c = json_request(value, {"response_format": {"type": "text"}})
    out = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {
        "content": '{"a": "<PERSON_1>"}'}}]})
    assert out["choices"][0]["message"]["content"] == f'{{"a": "{value}"}}'


# -- logprobs tokens: every written form ---------------------------------------------------------------

def token_entry(token: str) -> dict[str, Any]:
    raw = list(token.encode())
    return {"token": token, "logprob": -0.5, "bytes": raw, "top_logprobs": [{"token": token, "logprob": -0.5,
                                                                           "bytes": raw}]}


@pytest.mark.parametrize("written", [
    'Mail \\u003cEMAIL_1\\u003e now',
    'Mail &lt;EMAIL_1&gt; now',
    '{"to": "\\u003cEMAIL_1\\u003e", "who": "\\u003cPERSON_1\\u003e"}',
])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_logprobs_tokens_restore_escaped_forms_like_the_content(written: str, size: int) -> None:
    hook, c, _ = request('Jo "JJ"', stream=True)
    tokens = [written[i:i + size] for i in range(0, len(written), size)]
    whole = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {"content": written},
                                                                   "logprobs": {"content": [token_entry(t)
                                                                                            for t in tokens]}}]})
    content = whole["choices"][0]["message"]["content"]
    assert "EMAIL_1" not in content
    assert "".join(e["token"] for e in whole["choices"][0]["logprobs"]["content"]) == content
    f = answer_filter(hook, c)
    out = [f.filter_chunk({"choices": [{"index": 0, "finish_reason": None, "delta": {"content": "".join(pair)},
                                        "logprobs": {"content": [token_entry(t) for t in pair]}}]})
           for pair in (tokens[i:i + 2] for i in range(0, len(tokens), 2))]
    out.append(f.filter_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    streamed = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in out)
    streamed_tokens = "".join(e["token"] for ch in out for e in
                              ((ch["choices"][0].get("logprobs") or {}).get("content") or []))
    assert streamed == content == streamed_tokens


def test_a_token_holding_one_placeholders_end_and_the_nexts_start() -> None:
    # "<" + "EMAIL_1><" + "EMAIL_1>": the second token must wait with the first, or neither is restored
    restorer = TokenRestorer({"<EMAIL_1>": "a@b.io"})
    out = restorer.feed(["<", "EMAIL_1><"], str, lambda e, t, s: t)
    out += restorer.feed(["EMAIL_1>", "."], str, lambda e, t, s: t) + restorer.finish(str, lambda e, t, s: t)
    assert "".join(out) == "a@b.ioa@b.io." and len(out) == 4


def whole_with_tokens(field: str, written: str) -> tuple[str, str]:
    """A JSON-format request's whole answer with ``written`` in ``field`` and one logprobs token per
    character: (the filtered field, its filtered tokens joined)."""
    hook, c = json_request('Jo "JJ"', JSON_FORMATS[0])
    whole = answer_filter(hook, c).filter_completion({"choices": [{"index": 0, "message": {field: written},
                                                                   "logprobs": {field: [token_entry(t) for t in
                                                                                        written]}}]})
    choice = whole["choices"][0]
    return choice["message"][field], "".join(e["token"] for e in choice["logprobs"][field])


def test_logprobs_tokens_follow_a_json_document() -> None:
    content, tokens = whole_with_tokens("content", '{"who": "<PERSON_1>"}')
    assert json.loads(content) == {"who": 'Jo "JJ"'}
    assert tokens == content


def test_refusal_tokens_of_a_json_request_stay_prose() -> None:
    # A refusal is prose even when the request asked for a JSON document: its tokens get the value as
    # is, as the refusal text does, not JSON-escaped.
    refusal, tokens = whole_with_tokens("refusal", "I will not write to <PERSON_1>.")
    assert refusal == 'I will not write to Jo "JJ".'
    assert tokens == refusal


# -- the request side: the same fields of earlier assistant turns are scanned ---------------------------

def test_custom_tool_input_refusal_and_reasoning_in_the_history_are_pseudonymised() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx(stream=True)
    out = run(hook.on_request(c, {"model": "m", "messages": [
        {"role": "user", "content": "mail my colleague"},
        {"role": "assistant", "content": None, "refusal": "I won't write to bob@globex.com",
         "reasoning_content": "the user is ann@acme.io", "reasoning": "call (415) 555-0132",
         "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "shell",
                                                                   "input": "sendmail ann@acme.io < note.txt"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sent"}]}))
    assistant = out["messages"][1]
    assert assistant["refusal"] == "I won't write to <EMAIL_1>"
    assert assistant["reasoning_content"] == "the user is <EMAIL_2>"
    assert "555-0132" not in assistant["reasoning"]
    assert assistant["tool_calls"][0]["custom"] == {"name": "shell", "input": "sendmail <EMAIL_2> < note.txt"}
    body = answer_filter(hook, c).filter_completion(whole_custom(["sendmail <EMAIL_2> <EMAIL_1>"], choices=1))
    assert body["choices"][0]["message"]["tool_calls"][0]["custom"]["input"] == "sendmail ann@acme.io bob@globex.com"
