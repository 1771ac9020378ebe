"""Structured outputs through the official ``openai`` client against a real ``kvfence serve``.

The models have random weights, so sampled tokens are arbitrary: every answer that parses and
validates does so because the mask held at every step. Answers are checked by an independent
validator (tests/engine/test_structured_schemas.py), not by the grammar library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from tests.engine.test_structured_schemas import SCHEMAS, check_instance
from tests.server.conftest import RunningServer, engine_factory, serve
from tests.server.foreign_models import build_foreign_model

HI = [{"role": "user", "content": "Answer in JSON."}]
MAX_TOKENS = 700


def _client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"], max_retries=0, timeout=120)


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def _chat(server: RunningServer, seed: int, **kwargs: Any) -> Any:
    with _client(server) as client:
        return client.chat.completions.create(  # type: ignore[call-overload]
            model=_model(server), messages=HI, temperature=1.0, seed=seed,
            **{"max_tokens": MAX_TOKENS, **kwargs})


def _schema_format(name: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}}


def _finished(choices: list[Any], min_stopped: int) -> list[str]:
    """The texts of answers that ended on EOS; answers cut by max_tokens are incomplete by design."""
    assert all(c.finish_reason in ("stop", "length") for c in choices)
    texts = [c.message.content for c in choices if c.finish_reason == "stop"]
    assert len(texts) >= min_stopped, [c.finish_reason for c in choices]
    return texts


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_answers_validate(server: RunningServer, name: str) -> None:
    answers = [_chat(server, seed, response_format=_schema_format(name)).choices[0] for seed in range(3)]
    texts = _finished(answers, min_stopped=2)
    for text in texts:
        check_instance(json.loads(text), SCHEMAS[name])
    assert len(set(texts)) == len(texts), "different seeds should give different answers"


def test_json_object_answers_are_objects(server: RunningServer) -> None:
    answers = [_chat(server, seed, response_format={"type": "json_object"}).choices[0] for seed in range(6)]
    for text in _finished(answers, min_stopped=4):
        assert isinstance(json.loads(text), dict)


def test_streaming_gives_the_same_text(server: RunningServer) -> None:
    kwargs = {"response_format": _schema_format("nested"), "seed": 11}
    full = _chat(server, **kwargs).choices[0]  # type: ignore[arg-type]
    with _client(server) as client:
        stream = client.chat.completions.create(model=_model(server), messages=HI, temperature=1.0,  # type: ignore[call-overload]
                                                max_tokens=MAX_TOKENS, stream=True, **kwargs)
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == full.message.content and reasons == [full.finish_reason]
    if full.finish_reason == "stop":
        check_instance(json.loads(text), SCHEMAS["nested"])


def test_n_choices_share_the_constraint_and_each_validates(server: RunningServer) -> None:
    answer = _chat(server, 21, n=4, response_format=_schema_format("person"))
    texts = _finished(answer.choices, min_stopped=3)
    for text in texts:
        check_instance(json.loads(text), SCHEMAS["person"])
    assert len(set(texts)) == len(texts)


def test_openai_parse_with_a_pydantic_model(server: RunningServer) -> None:
    class Point(BaseModel):
        x: int
        y: int
        label: str = Field(max_length=8)

    with _client(server) as client:
        done = []
        for seed in range(3):
            completion = client.chat.completions.parse(model=_model(server), messages=HI,  # type: ignore[arg-type]
                                                       response_format=Point, seed=seed, max_tokens=MAX_TOKENS)
            if completion.choices[0].finish_reason == "stop":
                parsed = completion.choices[0].message.parsed
                assert isinstance(parsed, Point) and len(parsed.label) <= 8
                done.append(parsed)
    assert len(done) >= 2


def test_choice_regex_and_grammar_on_both_endpoints(server: RunningServer) -> None:
    choices = ["positive", "negative", "neutral"]
    with _client(server) as client:
        seen = set()
        for seed in range(6):
            text = client.completions.create(model=_model(server), prompt="Sentiment:", max_tokens=20, seed=seed,
                                             extra_body={"guided_choice": choices}).choices[0].text
            chat = _chat(server, seed, max_tokens=20, extra_body={"structured_outputs": {"choice": choices}})
            seen |= {text, chat.choices[0].message.content}
        assert seen <= set(choices)
        for seed in range(3):
            out = client.completions.create(model=_model(server), prompt="Code:", max_tokens=30, seed=seed,
                                            extra_body={"structured_outputs": {"regex": r"[A-Z]{2}-[0-9]{3}"}})
            assert out.choices[0].finish_reason == "stop" and re.fullmatch(r"[A-Z]{2}-[0-9]{3}", out.choices[0].text)
            legacy = _chat(server, seed, max_tokens=30, extra_body={"guided_regex": r"(true|false)"})
            assert legacy.choices[0].message.content in ("true", "false")
            tree = _chat(server, seed, max_tokens=200,
                         extra_body={"structured_outputs": {"grammar": 'root ::= "(" root ")" | "x"'}})
            content = tree.choices[0].message.content
            assert tree.choices[0].finish_reason == "length" or re.fullmatch(r"\(*x\)*", content), content


@pytest.mark.parametrize("field", ["guided_json", "response_format"])
def test_json_schema_on_completions(server: RunningServer, field: str) -> None:
    value = SCHEMAS["person"] if field == "guided_json" else _schema_format("person")
    with _client(server) as client:
        outs = [client.completions.create(model=_model(server), prompt="{", max_tokens=MAX_TOKENS, seed=seed,
                                          extra_body={field: value}).choices[0]
                for seed in range(3)]
    stopped = [o.text for o in outs if o.finish_reason == "stop"]
    assert len(stopped) >= 2
    for text in stopped:
        check_instance(json.loads(text), SCHEMAS["person"])


def test_ignore_eos_ends_when_the_grammar_is_complete_and_max_tokens_cuts(server: RunningServer) -> None:
    done = _chat(server, 3, max_tokens=50, extra_body={"guided_choice": ["done"], "ignore_eos": True})
    assert done.choices[0].finish_reason == "stop" and done.choices[0].message.content == "done"
    cut = _chat(server, 3, max_tokens=4, response_format=_schema_format("nested"))
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 4
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut.choices[0].message.content)


def test_disable_additional_properties_closes_every_object(server: RunningServer) -> None:
    open_schema = {"type": "object", "properties": {"a": {"type": "integer"},
                                                    "b": {"type": "object", "properties": {"c": {"const": {"x": 1}}}}},
                   "required": ["a", "b"]}
    closed = {"type": "object", "properties": {"a": {"type": "integer"},
                                               "b": {"type": "object", "properties": {"c": {"const": {"x": 1}}},
                                                     "additionalProperties": False}},
              "required": ["a", "b"], "additionalProperties": False}
    stopped = []
    for seed in range(4):
        answer = _chat(server, seed, extra_body={"structured_outputs": {
            "json": open_schema, "disable_additional_properties": True}}).choices[0]
        if answer.finish_reason == "stop":
            stopped.append(answer.message.content)
            check_instance(json.loads(answer.message.content), closed)
    assert len(stopped) >= 2


def _post(server: RunningServer, body: dict[str, Any], path: str = "/v1/chat/completions") -> httpx.Response:
    payload = {"model": _model(server), "max_tokens": 8, **body}
    if path.endswith("chat/completions"):
        payload.setdefault("messages", HI)
    else:
        payload.setdefault("prompt", "x")
    return httpx.post(server.base_url + path, json=payload, headers=server.headers("alice"), timeout=60)


@pytest.mark.parametrize(("body", "param"), [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}},
     "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}},
     "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "{oops"}}},
     "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}}, "response_format"),
    ({"response_format": {"type": "structural_tag"}}, "response_format"),
    ({"response_format": "json"}, "response_format"),
    ({"guided_regex": "a(b"}, "guided_regex"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_grammar": "root ::= nowhere"}, "guided_grammar"),
    ({"guided_json": {"type": "array", "uniqueItems": True}}, "guided_json"),
    ({"structured_outputs": {"regex": "(("}}, "structured_outputs"),
    ({"structured_outputs": {"json": {}, "regex": "a"}}, "structured_outputs"),
    ({"structured_outputs": {"jsonn": {}}}, "structured_outputs"),
    ({"structured_outputs": {}}, "structured_outputs"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    ({"response_format": {"type": "json_object"}, "min_tokens": 3}, "min_tokens"),
])
def test_bad_constraints_are_400s(server: RunningServer, body: dict[str, Any], param: str) -> None:
    r = _post(server, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


def test_completions_refuse_a_bad_regex_too(server: RunningServer) -> None:
    r = _post(server, {"structured_outputs": {"regex": "[z-a]"}}, path="/v1/completions")
    assert r.status_code == 400 and r.json()["error"]["param"] == "structured_outputs"


@pytest.fixture(scope="module", params=["gpt2_bpe", "llama2_sentencepiece", "wordpiece"])
def foreign(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[str, RunningServer]]:
    model = build_foreign_model(tmp_path_factory.mktemp(request.param), request.param)
    factory = engine_factory(model=str(model.path), max_model_len=512, kv_cache_tokens=4096)
    with serve(tmp_path_factory.mktemp("srv"), factory=factory) as running:
        yield request.param, running


def test_foreign_tokenizers(foreign: tuple[str, RunningServer]) -> None:
    """Byte-level BPE and SentencePiece byte fallback serve valid JSON; WordPiece is a clear 400."""
    kind, server = foreign
    if kind == "wordpiece":
        r = _post(server, {"response_format": {"type": "json_object"}})
        assert r.status_code == 400 and "tokenizer" in r.json()["error"]["message"]
        return
    answers = [_chat(server, seed, max_tokens=440, response_format=_schema_format("nested")).choices[0]
               for seed in range(3)]
    for text in _finished(answers, min_stopped=2):
        check_instance(json.loads(text), SCHEMAS["nested"])
    objects = [_chat(server, seed, max_tokens=440, response_format={"type": "json_object"}).choices[0]
               for seed in range(3)]
    for text in _finished(objects, min_stopped=2):
        assert isinstance(json.loads(text), dict)
