"""Issue 16, 1, 2 and 5 through a real ``kvfence gateway`` and a backend that leaks on purpose.

- conversation history: text the model wrote for acme, which acme then sends back as history, is
  acme's: leaked into globex's answer it is withheld;
- poisoning and repeated leaks: ``test_e2e_leak_repeats.py``;
- every answer field a client reads: ``top_logprobs`` alternatives, ``tool_calls[].function.name``,
  ``message.name``, unknown fields (dropped), Cyrillic look-alike letters, a canary in lower case with
  spaces.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.gateway.protection.test_e2e_protection import (  # noqa: F401  (the fixtures)
    KEYS,
    LeakyBackend,
    audit_url,
    backend,
    chat,
    client,
    gw,
)

SECRET = ("Confidential: Halvorsen Maritime will acquire Tideline Logistics for four hundred million euros, "
          "announcement planned after the board meeting on the third of March.")


def set_mode(backend: LeakyBackend, mode: str, **extra: Any) -> None:  # noqa: F811
    httpx.post(backend.root + "/_mode", json={"mode": mode, **extra}).raise_for_status()


def post(gw: Any, org: str, body: dict[str, Any]) -> httpx.Response:  # noqa: F811
    base = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    return httpx.post(gw.url + "/chat/completions", json={**base, **body},
                      headers={"authorization": f"Bearer {KEYS[org]}"}, timeout=30)


def withheld(answer: httpx.Response) -> bool:
    return answer.status_code == 502 and "cross_tenant_leak" in answer.text


@pytest.mark.parametrize("stream", [False, True])
def test_history_the_model_wrote_for_acme_is_acmes(gw: Any, backend: LeakyBackend, stream: bool) -> None:  # noqa: F811
    set_mode(backend, "fixed", text=("In short, the shipping group intends to take over its logistics rival for "
                                     "roughly four hundred and twelve million, completion expected early in spring."))
    restated = chat(gw, "acme", SECRET)  # the model restates acme's plan in its own words
    assert "shipping group" in restated
    set_mode(backend, "benign")
    history = [{"role": "user", "content": SECRET}, {"role": "assistant", "content": restated},
               {"role": "user", "content": "Now draft the press release."}]
    assert post(gw, "acme", {"messages": history}).status_code == 200
    set_mode(backend, "leak_history")  # the next answer carries the history acme just sent
    c = client(gw, "globex")
    try:
        with pytest.raises(openai.APIError):
            if stream:
                text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "any news?"}], stream=True) if ch.choices)
                assert "shipping group" not in text
            else:
                c.chat.completions.create(model="m", messages=[{"role": "user", "content": "any news?"}])
    finally:
        c.close()


@pytest.mark.parametrize("mode", ["leak_top_logprobs", "leak_tool_name", "leak_message_name", "leak_lookalike"])
def test_a_leak_in_any_answer_field_is_withheld(gw: Any, backend: LeakyBackend, mode: str) -> None:  # noqa: F811
    set_mode(backend, "benign")
    chat(gw, "acme", SECRET)
    set_mode(backend, mode)
    answer = post(gw, "globex", {"logprobs": True, "top_logprobs": 2} if mode == "leak_top_logprobs" else {})
    assert withheld(answer), answer.text
    assert "Tideline" not in answer.text and "tideline" not in answer.text.lower()


def test_unknown_answer_fields_are_dropped(gw: Any, backend: LeakyBackend) -> None:  # noqa: F811
    set_mode(backend, "benign")
    chat(gw, "acme", SECRET)
    set_mode(backend, "leak_unknown_field")
    answer = post(gw, "globex", {})
    assert answer.status_code == 200
    assert "Tideline" not in answer.text and "x_debug" not in answer.text and "x_trace" not in answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "All good here, nothing to report."
