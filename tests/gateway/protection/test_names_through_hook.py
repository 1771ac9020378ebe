"""Names through the gateway's protection hook: in a system prompt, a tool-call argument and a CSV
attachment they leave as placeholders, one per person, and come back in the answer at every split."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.gateway.protection.test_hook import answer_through, ctx, make_hook, make_policy, run

CSV = "id,last_name,first_name,email\n7,okonkwo,Chidera,c@example.org\n8,Lindqvist,Hannah,h@example.org\n"


def body() -> dict[str, Any]:
    return {"model": "m", "messages": [
        {"role": "system", "content": "You assist Dr. Priya Raman, head of procurement."},
        {"role": "user", "content": [
            {"type": "text", "text": "Summarise the attached list for Priya."},
            {"type": "text", "text": CSV},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "send_mail", "arguments": json.dumps({"to_name": "Raman, Priya", "cc": "Tomasz Wójcik"})},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sent to Tomasz Wójcik"},
    ]}


def outgoing_texts(out: dict[str, Any]) -> str:
    return json.dumps(out, ensure_ascii=False)


def test_names_in_system_prompt_tool_arguments_and_csv_leave_as_placeholders() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx()
    out = run(hook.on_request(c, body()))
    sent = outgoing_texts(out)
    for name in ("Priya", "Raman", "okonkwo", "Chidera", "Lindqvist", "Hannah", "Tomasz", "Wójcik"):
        assert name not in sent, name
    system = out["messages"][0]["content"]
    assert system == "You assist Dr. <PERSON_1>, head of procurement."
    # "Priya" alone and "Raman, Priya" in the tool call are the same person as "Dr. Priya Raman"
    assert out["messages"][1]["content"][0]["text"] == "Summarise the attached list for <PERSON_1>."
    args = json.loads(out["messages"][2]["tool_calls"][0]["function"]["arguments"])
    assert args["to_name"] == "<PERSON_1>"
    assert args["cc"] == out["messages"][3]["content"].removeprefix("sent to ")
    assert "<PERSON_" in out["messages"][1]["content"][1]["text"]


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 11])
def test_names_are_restored_in_a_streamed_answer_at_every_split(chunk: int) -> None:
    hook, _ = make_hook(make_policy())
    c = ctx(stream=True)
    out = run(hook.on_request(c, body()))
    cc = json.loads(out["messages"][2]["tool_calls"][0]["function"]["arguments"])["cc"]
    answer = f"Done, <PERSON_1>: I wrote to {cc} and listed the rest.<PERSON_1>"
    assert answer_through(hook, c, answer, chunk=chunk) == \
        "Done, Priya Raman: I wrote to Tomasz Wójcik and listed the rest.Priya Raman"


def test_every_cut_of_a_placeholder_is_restored() -> None:
    hook, _ = make_hook(make_policy())
    c = ctx(stream=True)
    run(hook.on_request(c, body()))
    text = "x<PERSON_1>y"
    for cut in range(1, len(text)):
        f = hook.response_filter(c)
        assert f.feed(text[:cut]) + f.feed(text[cut:]) + f.finish() == "xPriya Ramany", cut


def test_names_can_be_passed_by_policy() -> None:
    hook, _ = make_hook(make_policy(public={"entities": {"PERSON": "pass"}}))
    out = run(hook.on_request(ctx(), body()))
    assert out["messages"][0]["content"] == "You assist Dr. Priya Raman, head of procurement."
