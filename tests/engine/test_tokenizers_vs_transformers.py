"""Tokenizers built the ways real checkpoints are, read by kvfence and by transformers' ``AutoTokenizer``:
the same ids, the same text back, the same chat prompt.

transformers 5 rebuilds part of a ``tokenizer.json`` per ``tokenizer_class`` (a Llama-2 file with the
legacy ``Prepend("▁")`` normalizer is encoded with a ``Metaspace`` pre-tokenizer instead), so the
cases cover the classes of the architectures kvfence runs, written both by transformers 5 itself
(``save_pretrained``) and in the older layout of the hub's Llama-2 files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from kvfence.engine.text.detokenizer import IncrementalDetokenizer
from kvfence.engine.text.tokenizer import Tokenizer
from kvfence.errors import InvalidParameterError

CORPUS = [
    "Hello world, this is a tiny corpus for a tiny tokenizer.",
    "Grüße aus München: naïve café, crème brûlée.",
    "日本語のテキストです。東京",
    "def f(x):\n    return x + 1\n",
    "Tenants share a server but never a cache page.",
] * 10
TEXTS = [
    "Hello world",
    " leading space",
    "Grüße 日本語 😀🎉 ok",
    "a\n\nb  c\t d",
    "<|im_start|>user\nhi there<|im_end|>",
    "naïve café",
]
SPECIALS = ["<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set rest = messages[1:] %}{% else %}{% set system = none %}{% set rest = messages %}{% endif %}"
    "{%- if tools %}<|im_start|>system\n{{ system or '' }}\n# Tools\n{% for t in tools %}{{ t | tojson }}\n"
    "{% endfor %}<|im_end|>\n{% elif system %}<|im_start|>system\n{{ system }}<|im_end|>\n{% endif %}"
    "{%- for m in rest %}{% if m['role'] not in ['user', 'assistant'] %}"
    "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Wetter für <Ort> & Zeit",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def _train(byte_level: bool) -> HFTokenizer:
    tok = HFTokenizer(models.BPE(byte_fallback=not byte_level, unk_token=None if byte_level else "<unk>"))
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=["<|endoftext|>"], show_progress=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        specials = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
        trainer = trainers.BpeTrainer(vocab_size=640, special_tokens=specials, limit_alphabet=50, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def _vocab_merges(tok: HFTokenizer) -> tuple[dict[str, int], list[tuple[str, str]]]:
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return model["vocab"], merges  # type: ignore[return-value]


def _saved_by_transformers(make: Callable[[], Any]) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        tok = make()
        tok.add_special_tokens({"additional_special_tokens": SPECIALS})
        tok.chat_template = TEMPLATE
        tok.save_pretrained(out)  # transformers 5: the template goes to chat_template.jinja
    return build


def _llama(**kwargs: Any) -> Callable[[Path], None]:
    import transformers

    vocab, merges = _vocab_merges(_train(byte_level=False))
    return _saved_by_transformers(lambda: transformers.LlamaTokenizer(vocab=vocab, merges=merges, **kwargs))


def _gemma() -> Callable[[Path], None]:
    import transformers

    vocab, merges = _vocab_merges(_train(byte_level=False))
    return _saved_by_transformers(lambda: transformers.GemmaTokenizer(
        vocab=vocab, merges=merges, unk_token="<unk>", bos_token="<s>", eos_token="</s>"))


def _gemma_other_pipeline(out: Path) -> None:
    """A SentencePiece file labelled ``GemmaTokenizer`` whose own pipeline is Llama's Metaspace: transformers 5
    encodes it the Gemma way (spaces to "▁", no prefix space), and so must kvfence."""
    tok = _train(byte_level=False)
    tok.decoder = decoders.Metaspace()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GemmaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "chat_template": TEMPLATE,
    }))


def _byte_level(cls_name: str) -> Callable[[Path], None]:
    import transformers

    vocab, merges = _vocab_merges(_train(byte_level=True))
    return _saved_by_transformers(lambda: getattr(transformers, cls_name)(vocab=vocab, merges=merges))


def _hub_llama2_layout(
    out: Path, add_bos_token: bool = True, add_eos_token: bool = False, bos_rule: bool = True
) -> None:
    """The hub's Llama-2 files: Prepend/Replace normalizer, ``<s>`` from the post-processor, class
    ``LlamaTokenizerFast``, template inside tokenizer_config.json. transformers 5 adds what the file's
    post-processor adds, whatever ``add_bos_token`` / ``add_eos_token`` say (kvfence before this test
    prepended BOS on the flag alone)."""
    tok = _train(byte_level=False)
    tok.pre_tokenizer = None
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    if bos_rule:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": add_bos_token, "add_eos_token": add_eos_token, "legacy": False, "chat_template": TEMPLATE,
    }))


def _plain_fast(out: Path) -> None:
    """No model-specific class (Llama-3 style ``PreTrainedTokenizerFast``): the file is taken as it is."""
    tok = _train(byte_level=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "chat_template": TEMPLATE,
    }))


BUILDERS: dict[str, Callable[[], Callable[[Path], None]]] = {
    "llama": lambda: _llama(),
    "llama-add-eos-no-bos": lambda: _llama(add_bos_token=False, add_eos_token=True),
    "llama2-hub-layout": lambda: _hub_llama2_layout,
    "llama2-hub-layout-eos-not-bos": lambda: lambda out: _hub_llama2_layout(out, add_bos_token=False, add_eos_token=True),
    "llama2-hub-layout-no-bos-rule": lambda: lambda out: _hub_llama2_layout(out, bos_rule=False),
    "gemma": lambda: _gemma(),
    "gemma-file-with-another-pipeline": lambda: _gemma_other_pipeline,
    "qwen2": lambda: _byte_level("Qwen2Tokenizer"),
    "gpt2": lambda: _byte_level("GPT2Tokenizer"),
    "pretrained-fast": lambda: _plain_fast,
}


@pytest.fixture(scope="module", params=list(BUILDERS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Tokenizer, Any]:
    import transformers

    out = tmp_path_factory.mktemp(request.param)
    BUILDERS[request.param]()(out)
    return Tokenizer.from_dir(out), transformers.AutoTokenizer.from_pretrained(out)


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_autotokenizers(pair: tuple[Tokenizer, Any], text: str) -> None:
    ours, theirs = pair
    assert ours.encode(text) == theirs.encode(text)
    assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", TEXTS)
def test_text_back_equals_autotokenizers(pair: tuple[Tokenizer, Any], text: str) -> None:
    ours, theirs = pair
    ids = theirs.encode(text)
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    assert ours.decode(ids, skip_special_tokens=False) == theirs.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_text_is_whole_characters_and_ends_as_decode(pair: tuple[Tokenizer, Any], text: str) -> None:
    """Token by token, as an answer streams: no U+FFFD from a character split over byte tokens, and the
    pieces join to exactly the text the answer adds to the prompt's in ``decode`` (with SentencePiece
    the answer's first space is kept: it follows the prompt's text)."""
    ours, theirs = pair
    prompt = theirs.encode("Hello")
    answer = theirs.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(ours, prompt, stop=[])
    pieces = []
    for token in answer:
        detok.add(token)
        pieces.append(detok.take_delta())
    pieces.append(detok.take_final_delta())
    assert not any("\ufffd" in p for p in pieces)
    before = theirs.decode(prompt, skip_special_tokens=True)
    whole = theirs.decode(prompt + answer, skip_special_tokens=True)
    assert whole.startswith(before)
    assert "".join(pieces) == whole[len(before):]


@pytest.mark.parametrize(
    ("messages", "tools", "add_generation_prompt"),
    [
        ([{"role": "user", "content": "hi"}], None, True),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Grüße 😀"},
          {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}], None, False),
        ([{"role": "system", "content": "You call tools."}, {"role": "user", "content": "Weather in Paris?"}], TOOLS, True),
    ],
)
def test_chat_prompt_equals_autotokenizers(
    pair: tuple[Tokenizer, Any], messages: list[dict[str, str]], tools: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
) -> None:
    ours, theirs = pair
    text = ours.apply_chat_template(messages, add_generation_prompt, template_kwargs={"tools": tools})
    assert text == theirs.apply_chat_template(messages, tools=tools, tokenize=False,
                                              add_generation_prompt=add_generation_prompt)
    ids = theirs.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=add_generation_prompt)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert ours.encode(text, add_special_tokens=False) == list(ids)


def test_template_raise_exception_is_a_request_error(pair: tuple[Tokenizer, Any]) -> None:
    ours, _ = pair
    with pytest.raises(InvalidParameterError, match="roles must alternate"):
        ours.apply_chat_template([{"role": "tool", "content": "42"}])


def test_named_templates_pick_tool_use_for_a_request_with_tools(tmp_path: Path) -> None:
    """transformers 5 saves a dict of templates as chat_template.jinja plus
    additional_chat_templates/NAME.jinja; older files list them in tokenizer_config.json. Either
    way a request with tools renders with ``tool_use``, one without with ``default``."""
    import transformers

    templates = {"default": "DEFAULT {{ messages[0]['content'] }}",
                 "tool_use": "TOOLS {{ tools | length }} {{ messages[0]['content'] }}"}
    saved = tmp_path / "saved"
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=_train(byte_level=True), eos_token="<|endoftext|>")
    hf.chat_template = templates
    hf.save_pretrained(saved)
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "tokenizer.json").write_text((saved / "tokenizer.json").read_text())
    (listed / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|endoftext|>", "chat_template": [{"name": k, "template": v} for k, v in templates.items()]}))
    messages = [{"role": "user", "content": "hi"}]
    for model_dir in (saved, listed):
        ours, theirs = Tokenizer.from_dir(model_dir), transformers.AutoTokenizer.from_pretrained(model_dir)
        for tools in (None, TOOLS):
            expected = theirs.apply_chat_template(messages, tools=tools, tokenize=False)
            assert ours.apply_chat_template(messages, False, template_kwargs={"tools": tools}) == expected
            assert expected.startswith("TOOLS 1" if tools else "DEFAULT")


def test_a_class_name_contradicting_the_file_keeps_the_files_pipeline(tmp_path: Path) -> None:
    """A byte-level (Llama-3 style) tokenizer.json labelled ``LlamaTokenizerFast``: rebuilding it as
    SentencePiece would tokenize differently from how the model was trained, so the file wins."""
    tok = _train(byte_level=True)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizerFast",
                                                                "eos_token": "<|endoftext|>"}))
    ours = Tokenizer.from_dir(tmp_path)
    for text in TEXTS:
        assert ours.encode(text) == tok.encode(text).ids
        assert ours.decode(tok.encode(text).ids) == tok.decode(tok.encode(text).ids)
