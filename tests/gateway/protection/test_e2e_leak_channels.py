"""Issue 16, 1, 2 and 5 through a real ``kvfence gateway`` and a backend that leaks on purpose.

- conversation history: text the model wrote for acme, which acme then sends back as history, is
  acme's: leaked into globex's answer it is withheld;
- poisoning: one tenant sending a common refusal first costs at most ``common_orgs - 1`` withheld
  answers of others, and a distinctive leak in the same campaign is still caught;
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


def test_poisoning_with_a_refusal_withholds_at_most_two_answers(gw: Any, backend: LeakyBackend) -> None:  # noqa: F811
    refusal = ("I am sorry, but I cannot help with that request today. If you have another question about "
               "your account, I would be glad to help with something else.")
    set_mode(backend, "benign")
    assert post(gw, "org1", {"messages": [{"role": "user", "content": f"Say exactly: {refusal}"}]}).status_code == 200
    set_mode(backend, "fixed", text=refusal)  # the model writes the refusal for everyone
    outcomes = [withheld(post(gw, f"org{i}", {})) for i in range(2, 14)]
    assert sum(outcomes) <= 2 and not any(outcomes[2:]), outcomes
    # a distinctive leak during the campaign is still caught
    set_mode(backend, "benign")
    chat(gw, "acme", SECRET)
    set_mode(backend, "leak")
    assert withheld(post(gw, "org15", {}))


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
