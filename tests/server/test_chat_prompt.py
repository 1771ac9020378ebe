"""How a chat request becomes the prompt, as a vLLM user expects: BOS and ``add_special_tokens``,
``add_generation_prompt`` / ``continue_final_message``, chat ``echo``, and content parts (the list
as sent to a template that iterates over parts, joined by newlines for one that does not, a 400
naming any non-text part)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.server.api_errors import APIError
from kvfence.server.openai.prepare import LoadedModel, chat_prompt, content_format
from kvfence.server.openai.protocol import ChatCompletionRequest
from tests.server.conftest import RunningServer

HI = [{"role": "user", "content": "hi"}]
GREEDY: dict[str, Any] = {"temperature": 0, "extra_body": {"ignore_eos": True}}
# Neither writes BOS; the second prints the content (parts are joined before it sees them).
NO_BOS_PARTS = ("{% for m in messages %}<{{ m['role'] }}>{% for p in m['content'] %}{{ p['text'] }}|{% endfor %}"
                "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
NO_BOS_STRING = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def _post(server: RunningServer, path: str, body: Any) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, headers=server.headers("alice"), timeout=60)


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def _client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"], max_retries=0, timeout=60)


def _with_template(server: RunningServer, template: str) -> LoadedModel:
    real = server.app.state.serving.model
    tok = real.tokenizer
    other = Tokenizer(tok.backend, bos_token=tok.bos_token, eos_token=tok.eos_token, chat_template=template)
    return LoadedModel(real.name, real.served_names, other, real.capacity, True, real.vocab_size)


def _prompt_tokens(server: RunningServer, **body: Any) -> int:
    r = _post(server, "/v1/chat/completions", {"model": _model(server), "max_tokens": 1, **body})
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens"])


def test_one_bos_whatever_add_special_tokens(server: RunningServer) -> None:
    """The built-in template writes BOS: the default adds none, add_special_tokens true adds no second one."""
    tok = server.app.state.serving.model.tokenizer
    bos = tok.bos_token_id
    rendered = tok.encode(tok.apply_chat_template(HI), add_special_tokens=False)
    assert rendered[:1] == [bos] and rendered[1] != bos
    assert _prompt_tokens(server, messages=HI) == len(rendered)
    assert _prompt_tokens(server, messages=HI, add_special_tokens=True) == len(rendered)
    assert _prompt_tokens(server, messages=HI, add_special_tokens=False) == len(rendered)
    for extra in ({}, {"add_special_tokens": True}):
        ids = _post(server, "/tokenize", {"messages": HI, **extra}).json()["tokens"]
        assert ids == rendered


def test_a_template_without_bos_gets_none_unless_asked(server: RunningServer) -> None:
    model = _with_template(server, NO_BOS_STRING)
    bos = model.tokenizer.bos_token_id
    plain = chat_prompt(HI, True, model)
    assert bos not in plain
    assert chat_prompt(HI, True, model, add_special_tokens=True) == [bos, *plain]


def test_completions_add_special_tokens(server: RunningServer) -> None:
    body = {"model": _model(server), "prompt": "hello", "max_tokens": 1}
    with_bos = _post(server, "/v1/completions", body).json()["usage"]["prompt_tokens"]
    without = _post(server, "/v1/completions", {**body, "add_special_tokens": False}).json()["usage"]["prompt_tokens"]
    assert without == with_bos - 1
    assert _post(server, "/tokenize", {"prompt": "hello", "add_special_tokens": False}).json()["count"] == without


def test_continue_final_message_implies_no_generation_prompt(server: RunningServer) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon"}]
    explicit = _prompt_tokens(server, messages=messages, continue_final_message=True, add_generation_prompt=False)
    assert _prompt_tokens(server, messages=messages, continue_final_message=True) == explicit
    tok = _post(server, "/tokenize", {"messages": messages, "continue_final_message": True}).json()
    assert tok["count"] == explicit
    bad = _post(server, "/v1/chat/completions", {"messages": messages, "continue_final_message": True,
                                                 "add_generation_prompt": True})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "continue_final_message"


def test_chat_echo_repeats_the_continued_message(server: RunningServer) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon"}]
    args: dict[str, Any] = {"model": _model(server), "messages": messages, "max_tokens": 4,
                            "extra_body": {"continue_final_message": True, "ignore_eos": True}, "temperature": 0}
    with _client(server) as client:
        plain = client.chat.completions.create(**args).choices[0].message.content
        args["extra_body"] = {**args["extra_body"], "echo": True}
        echoed = client.chat.completions.create(**args).choices[0].message.content
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **args)
                           if c.choices)
        # the last message is the user's and a generation prompt follows: nothing to echo
        user_last = client.chat.completions.create(model=_model(server), messages=HI, max_tokens=3, temperature=0,
                                                   extra_body={"echo": True, "ignore_eos": True})
        no_echo = client.chat.completions.create(model=_model(server), messages=HI, max_tokens=3, temperature=0,
                                                 extra_body={"ignore_eos": True})
    assert plain is not None and echoed == "Once upon" + plain == streamed
    assert user_last.choices[0].message.content == no_echo.choices[0].message.content


def test_parts_reach_a_template_that_iterates_over_them(server: RunningServer) -> None:
    """The built-in template loops over parts (joining them without a separator): it gets the list."""
    assert content_format(server.app.state.serving.model) == "openai"
    parts = [{"type": "text", "text": "he"}, {"type": "text", "text": "llo"}]
    as_list = _post(server, "/tokenize", {"messages": [{"role": "user", "content": parts}]}).json()["tokens"]
    assert as_list == _post(server, "/tokenize", {"messages": [{"role": "user", "content": "hello"}]}).json()["tokens"]
    assert as_list != _post(server, "/tokenize", {"messages": [{"role": "user", "content": "he\nllo"}]}).json()["tokens"]


def test_parts_are_joined_by_newlines_for_a_string_template(server: RunningServer) -> None:
    string_model, parts_model = _with_template(server, NO_BOS_STRING), _with_template(server, NO_BOS_PARTS)
    assert content_format(string_model) == "string" and content_format(parts_model) == "openai"
    req = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})
    tok = string_model.tokenizer
    assert chat_prompt(req.template_messages(content_format(string_model)), True, string_model) == tok.encode(
        "<user>a\nb<assistant>", add_special_tokens=False)
    assert chat_prompt(req.template_messages(content_format(parts_model)), True, parts_model) == tok.encode(
        "<user>a|b|<assistant>", add_special_tokens=False)


@pytest.mark.parametrize(("part", "kind"), [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, "image_url"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "input_audio"),
    ({"type": "file", "file": {"file_id": "f-1"}}, "file"),
])
def test_non_text_parts_are_a_400_naming_the_type(server: RunningServer, part: dict[str, Any], kind: str) -> None:
    content = [{"type": "text", "text": "what is this?"}, part]
    for path in ("/v1/chat/completions", "/tokenize"):
        r = _post(server, path, {"model": _model(server), "messages": [{"role": "user", "content": content}]})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert kind in error["message"] and error["param"] == "messages[0].content"


def test_content_format_is_checked_without_a_server() -> None:
    req = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})
    with pytest.raises(APIError, match="image_url"):
        req.template_messages("openai")


def test_chat_echo_with_max_tokens_zero_answers_the_message_only(server: RunningServer) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon a time"}]
    body = {"model": _model(server), "messages": messages, "max_tokens": 0, "echo": True,
            "continue_final_message": True, "logprobs": True}
    r = _post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == "Once upon a time" and choice["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == 0
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json={**body, "stream": True},
                      headers=server.headers("alice"), timeout=60) as stream:
        lines = [line for line in stream.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    deltas = [json.loads(line[6:])["choices"][0] for line in lines]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == "Once upon a time"
    assert deltas[-1]["finish_reason"] == "length"
    no_echo = _post(server, "/v1/chat/completions", {**body, "echo": False})
    assert no_echo.status_code == 400 and no_echo.json()["error"]["param"] == "max_tokens"
