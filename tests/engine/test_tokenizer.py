"""Tokenizer wrapper, chat templates, incremental UTF-8-safe detokenization, the built-in model files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvfence.engine.runner.default_model import DEFAULT_MODEL_NAME, ensure_default_model
from kvfence.engine.text.detokenizer import IncrementalDetokenizer
from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.errors import InvalidParameterError

TEXT = "Grüße, 世界! 🎉 ok"


@pytest.fixture(scope="module")
def tokenizer(default_model_dir: Path) -> Tokenizer:
    return Tokenizer.from_dir(default_model_dir)


def test_byte_level_round_trip(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(TEXT)
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.encode(TEXT, add_special_tokens=False) == list(TEXT.encode())
    assert tokenizer.decode(ids) == TEXT
    assert len(tokenizer.eos_token_ids) == 2


def test_chat_template_and_fallback(tokenizer: Tokenizer, default_model_dir: Path) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = tokenizer.apply_chat_template(messages)
    assert rendered.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>")
    assert rendered.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    ids = tokenizer.encode(rendered, add_special_tokens=False)
    assert ids.count(tokenizer.bos_token_id) == 1
    plain = Tokenizer.from_dir(default_model_dir)
    plain.chat_template = None
    assert plain.apply_chat_template(messages) == "system: Be brief.\nuser: Hi\nassistant:"


def test_template_errors_are_request_errors(default_model_dir: Path) -> None:
    strict = Tokenizer.from_dir(default_model_dir)
    strict.chat_template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok"
    strict._compiled_template = None
    with pytest.raises(InvalidParameterError, match="first must be user"):
        strict.apply_chat_template([{"role": "assistant", "content": "x"}])
    strict.chat_template = "{{ ''.__class__.__mro__ }}"  # the sandbox refuses attribute escapes
    strict._compiled_template = None
    with pytest.raises(InvalidParameterError):
        strict.apply_chat_template([{"role": "user", "content": "x"}])


def _with_template(default_model_dir: Path, template: str) -> Tokenizer:
    tok = Tokenizer.from_dir(default_model_dir)
    tok.chat_template = template
    return tok


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        # loopcontrols, as transformers enables them
        ("{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.content }}"
         "{% if loop.index > 1 %}{% break %}{% endif %}{% endfor %}", "Hi"),
        # tojson with the keyword arguments of transformers' filter, no HTML escaping
        ("{{ messages[1] | tojson(ensure_ascii=False, sort_keys=True) }}", '{"content": "Hi", "role": "user"}'),
        ("{{ {'a': 1, 'b': '<é>'} | tojson(indent=2, separators=(',', ': ')) }}", '{\n  "a": 1,\n  "b": "<é>"\n}'),
        # the {% generation %} block of training templates renders its body
        ("{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}", "[Be brief.][Hi]"),
    ],
)
def test_templates_written_for_transformers_render(default_model_dir: Path, template: str, expected: str) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert _with_template(default_model_dir, template).apply_chat_template(messages) == expected


def test_continue_final_message_and_template_kwargs(tokenizer: Tokenizer, default_model_dir: Path) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure, the answer is "}]
    closed = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    assert closed.endswith("Sure, the answer is<|eot_id|>")  # the Llama 3 template trims and closes it
    cont = tokenizer.apply_chat_template(messages, add_generation_prompt=False, continue_final_message=True)
    assert cont == closed[: closed.index("Sure, the answer is") + len("Sure, the answer is")]
    with pytest.raises(InvalidParameterError, match="exclude each other"):
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, continue_final_message=True)
    thinking = _with_template(default_model_dir, "{{ messages[0].content }}{% if enable_thinking is false %}/no_think"
                                                 "{% endif %}")
    assert thinking.apply_chat_template(messages, template_kwargs={"enable_thinking": False}) == "Hi/no_think"
    assert thinking.apply_chat_template(messages) == "Hi"
    silent = _with_template(default_model_dir, "{{ messages[0].content }}")
    with pytest.raises(InvalidParameterError, match="nothing to continue"):
        silent.apply_chat_template(messages, add_generation_prompt=False, continue_final_message=True)


def test_bos_and_eos_from_special_tokens_map(default_model_dir: Path, tmp_path: Path) -> None:
    """Checkpoints that name bos/eos only in special_tokens_map.json still render ``bos_token`` and stop on EOS."""
    d = tmp_path / "old"
    d.mkdir()
    (d / "tokenizer.json").write_bytes((default_model_dir / "tokenizer.json").read_bytes())
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ bos_token }}{{ messages[0].content }}"}))
    (d / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": {"content": "<|begin_of_text|>", "special": True}, "eos_token": "<|eot_id|>"}))
    tok = Tokenizer.from_dir(d)
    assert tok.apply_chat_template([{"role": "user", "content": "Hi"}]) == "<|begin_of_text|>Hi"
    assert tok.eos_token_ids == [tok.encode("<|eot_id|>", add_special_tokens=False)[0]]


def test_incremental_detokenizer_never_splits_a_character(tokenizer: Tokenizer) -> None:
    detok = IncrementalDetokenizer(tokenizer, tokenizer.encode("prompt"), stop=[])
    deltas = []
    for byte in TEXT.encode():
        detok.add(byte)
        deltas.append(detok.take_delta())
    deltas.append(detok.take_final_delta())
    assert "".join(deltas) == TEXT
    assert all("\ufffd" not in d for d in deltas)


def _stream_bytes_until_stop(detok: IncrementalDetokenizer) -> str:
    """TEXT fed one byte token at a time until a stop string matches: everything streamed."""
    streamed = ""
    for byte in TEXT.encode():
        detok.add(byte)
        streamed += detok.take_delta()
        if detok.stopped_on:
            break
    return streamed + detok.take_final_delta()


def test_stop_string_is_cut_and_never_streamed(tokenizer: Tokenizer) -> None:
    detok = IncrementalDetokenizer(tokenizer, [], stop=["世界", "never"])
    streamed = _stream_bytes_until_stop(detok)
    assert detok.stopped_on == "世界"
    assert streamed == detok.text == "Grüße, "


def test_stop_string_kept_on_request(tokenizer: Tokenizer) -> None:
    detok = IncrementalDetokenizer(tokenizer, [], stop=["世界"], include_stop=True)
    streamed = _stream_bytes_until_stop(detok)
    assert streamed == detok.text == "Grüße, 世界"


def test_special_tokens_kept_on_request(tokenizer: Tokenizer) -> None:
    header = tokenizer.encode("<|start_header_id|>", add_special_tokens=False)
    assert len(header) == 1 and header[0] in tokenizer.special_token_ids
    texts = []
    for skip in (True, False):
        detok = IncrementalDetokenizer(tokenizer, [], stop=[], skip_special_tokens=skip)
        for token in [*header, *b"ok"]:
            detok.add(token)
        texts.append(detok.take_final_delta())
    assert texts == ["ok", "<|start_header_id|>ok"]


def test_incomplete_bytes_at_the_end_become_replacement(tokenizer: Tokenizer) -> None:
    detok = IncrementalDetokenizer(tokenizer, [], stop=[])
    for byte in "a€".encode()[:-1]:
        detok.add(byte)
    assert detok.take_delta() == "a"
    assert detok.take_final_delta() == "\ufffd"


def test_default_model_is_deterministic_and_labelled(tmp_path: Path, default_model_dir: Path) -> None:
    again = ensure_default_model(tmp_path / "again")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (default_model_dir / name).read_bytes()
    config = json.loads((again / "config.json").read_text())
    assert config["kvfence_random_weights"] is True
    assert config["kvfence_model_name"] == DEFAULT_MODEL_NAME
    assert "random" in DEFAULT_MODEL_NAME
    assert ensure_default_model(again) == again  # reused, not rebuilt
