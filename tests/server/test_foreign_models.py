"""`kvfence serve` on models whose tokenizers it did not write: GPT-2 BPE, Llama-2 SentencePiece, WordPiece.

For each: streamed text equals the non-streamed text (byte-fallback and byte-level tokens split
multi-byte characters), chat prompts go through the model's own template, and the server stops on
an EOS that only ``generation_config.json``'s list declares.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.engine.text.detokenizer import IncrementalDetokenizer
from kvfence.engine.text.tokenizer import Tokenizer
from tests.server.conftest import RunningServer, engine_factory, serve
from tests.server.foreign_models import ForeignModel, build_foreign_model, build_parrot_model

KINDS = ["gpt2_bpe", "llama2_sentencepiece", "wordpiece"]
EOS_PROMPT = "Hello world"
TEXT = "Grüße, 世界! 🎉 tenants 😀"


@pytest.fixture(scope="module", params=KINDS)
def foreign(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[ForeignModel, RunningServer]]:
    model = build_foreign_model(tmp_path_factory.mktemp(request.param), request.param, eos_after=EOS_PROMPT)
    factory = engine_factory(model=str(model.path), max_model_len=512, kv_cache_tokens=4096)
    with serve(tmp_path_factory.mktemp("srv"), factory=factory) as running:
        yield model, running


def _client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"], max_retries=0, timeout=60)


def _name(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


@pytest.mark.parametrize("kind", KINDS)
def test_detokenizer_streams_multibyte_text_exactly(kind: str, tmp_path: Path) -> None:
    """Token by token, the released text never shows half a character and ends equal to decode()."""
    model = build_foreign_model(tmp_path, kind)
    tok = Tokenizer.from_dir(model.path)
    body = tok.encode(TEXT, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, tok.encode("context"), stop=[])
    deltas = []
    for token_id in body:
        detok.add(token_id)
        deltas.append(detok.take_delta())
    deltas.append(detok.take_final_delta())
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas).strip() == tok.decode(body).strip()
    if kind != "wordpiece":  # WordPiece has no bytes: unknown characters become [UNK]
        assert "".join(deltas).strip() == TEXT


def test_stream_equals_full_text(foreign: tuple[ForeignModel, RunningServer]) -> None:
    model, server = foreign
    kwargs = {"model": _name(server), "max_tokens": 24, "temperature": 0, "extra_body": {"ignore_eos": True}}
    with _client(server) as client:
        full = client.completions.create(prompt=TEXT, **kwargs)  # type: ignore[call-overload]
        streamed = client.completions.create(prompt=TEXT, stream=True, **kwargs)  # type: ignore[call-overload]
        text = "".join(c.choices[0].text for c in streamed if c.choices)
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXT}]
        chat = client.chat.completions.create(messages=messages, **kwargs)  # type: ignore[call-overload]
        chat_stream = client.chat.completions.create(messages=messages, stream=True, **kwargs)  # type: ignore[call-overload]
        chat_text = "".join(c.choices[0].delta.content or "" for c in chat_stream if c.choices)
    assert full.usage is not None and full.usage.completion_tokens == 24
    assert text == full.choices[0].text
    assert chat_text == chat.choices[0].message.content
    tok = Tokenizer.from_dir(model.path)
    rendered = tok.apply_chat_template(messages)
    assert chat.usage is not None
    assert chat.usage.prompt_tokens == len(tok.encode(rendered, add_special_tokens=False))
    assert model.eos_token not in (chat.choices[0].message.content or "")


def test_stops_on_every_eos_of_generation_config(foreign: tuple[ForeignModel, RunningServer]) -> None:
    model, server = foreign
    with _client(server) as client:
        stopped = client.completions.create(model=_name(server), prompt=EOS_PROMPT, max_tokens=16, temperature=0)
        ignored = client.completions.create(model=_name(server), prompt=EOS_PROMPT, max_tokens=16, temperature=0,
                                            extra_body={"ignore_eos": True})
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage is not None and stopped.usage.completion_tokens <= 2
    assert model.extra_eos_token not in stopped.choices[0].text
    assert ignored.choices[0].finish_reason == "length"
    assert ignored.usage is not None and ignored.usage.completion_tokens == 16


def test_async_client_streams_the_same_text(foreign: tuple[ForeignModel, RunningServer]) -> None:
    _, server = foreign

    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=server.keys["bob"],
                                      max_retries=0, timeout=60) as client:
            kwargs = {"model": _name(server), "messages": [{"role": "user", "content": "世界 🎉"}],
                      "max_completion_tokens": 20, "temperature": 0, "extra_body": {"ignore_eos": True}}
            full = await client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
            parts = [c.choices[0].delta.content or "" async for c in
                     await client.chat.completions.create(stream=True, **kwargs)  # type: ignore[call-overload]
                     if c.choices]
            return full.choices[0].message.content or "", "".join(parts)

    full, streamed = asyncio.run(run())
    assert streamed == full


@pytest.mark.parametrize("kind", ["gpt2_bpe", "llama2_sentencepiece"])
def test_token_bytes_of_byte_tokens(kind: str, tmp_path: Path) -> None:
    """logprobs' ``bytes``: the raw bytes of byte-level and byte-fallback tokens, half characters included."""
    tok = Tokenizer.from_dir(build_foreign_model(tmp_path, kind).path)
    ids = tok.encode("🎉", add_special_tokens=False)
    raw = [tok.token_bytes(t) for t in ids]
    assert all(r is not None for r in raw)
    assert b"".join(r for r in raw if r is not None).lstrip(b" ") == "🎉".encode()
    assert len(raw) > 1  # the emoji really is split across tokens


@pytest.mark.parametrize("kind", ["gpt2_bpe", "llama2_sentencepiece"])
def test_logprob_tokens_join_to_the_answer(kind: str, tmp_path: Path) -> None:
    """Chat ``logprobs.content[].token`` and completions ``tokens`` spell the answer, spaces included
    (a lone SentencePiece token decodes without its leading space), and ``bytes`` is each token's text."""
    text = "hello tenants share"
    prompt, messages = "Say it:", [{"role": "user", "content": "Say it:"}]
    rendered = Tokenizer.from_dir(build_foreign_model(tmp_path / "probe", kind).path).apply_chat_template(messages)
    build_parrot_model(tmp_path / "parrot", kind, text, [prompt, rendered])
    factory = engine_factory(model=str(tmp_path / "parrot"), max_model_len=256, kv_cache_tokens=1024)
    with serve(tmp_path / "srv", factory=factory) as server, _client(server) as client:
        chat = client.chat.completions.create(model=_name(server), messages=messages,  # type: ignore[arg-type]
                                              max_tokens=32, temperature=0, logprobs=True).choices[0]
        done = client.completions.create(model=_name(server), prompt=prompt, max_tokens=32, temperature=0,
                                         logprobs=0).choices[0]
    assert chat.logprobs is not None and chat.logprobs.content is not None
    entries = chat.logprobs.content[:-1]  # the last one is the EOS that ended the answer, not in its text
    assert chat.finish_reason == "stop" and (chat.message.content or "").strip() == text
    assert "".join(e.token for e in entries) == chat.message.content
    assert all(e.bytes is not None and bytes(e.bytes).decode() == e.token for e in entries)
    assert done.logprobs is not None and done.logprobs.tokens is not None
    assert done.text.strip() == text and "".join(done.logprobs.tokens[:-1]) == done.text


@pytest.mark.parametrize("kind", ["gpt2_bpe", "llama2_sentencepiece"])
def test_a_character_split_over_tokens_streams_whole(kind: str, tmp_path: Path) -> None:
    """The model emits 世界🎉 one byte token at a time: no chunk carries half a character or U+FFFD,
    the chunks join to the text, and the non-streamed answer is the same, on both endpoints."""
    text = "世界🎉"
    prompt, messages = "Say it:", [{"role": "user", "content": "Say it:"}]
    probe = build_foreign_model(tmp_path / "probe", kind)
    rendered = Tokenizer.from_dir(probe.path).apply_chat_template(messages)
    chain = build_parrot_model(tmp_path / "parrot", kind, text, [prompt, rendered])
    assert len(chain) >= 9  # one token per UTF-8 byte (plus SentencePiece's leading "▁")
    factory = engine_factory(model=str(tmp_path / "parrot"), max_model_len=256, kv_cache_tokens=1024)
    with serve(tmp_path / "srv", factory=factory) as server, _client(server) as client:
        for chat in (False, True):
            kwargs = {"model": _name(server), "max_tokens": 32, "temperature": 0}
            if chat:
                full = client.chat.completions.create(messages=messages, **kwargs).choices[0]  # type: ignore[call-overload]
                full_text, finish = full.message.content, full.finish_reason
                deltas = [c.choices[0].delta.content or "" for c in client.chat.completions.create(  # type: ignore[call-overload]
                    messages=messages, stream=True, **kwargs) if c.choices]
            else:
                one = client.completions.create(prompt=prompt, **kwargs).choices[0]  # type: ignore[call-overload]
                full_text, finish = one.text, one.finish_reason
                deltas = [c.choices[0].text for c in client.completions.create(  # type: ignore[call-overload]
                    prompt=prompt, stream=True, **kwargs) if c.choices]
            assert finish == "stop"
            assert full_text is not None and full_text.strip() == text
            assert "".join(deltas) == full_text
            assert all("\ufffd" not in d for d in deltas)
            assert sum(1 for d in deltas if d) >= 2  # the characters arrived in separate chunks
        # A stop string made of one multi-byte character, assembled from three byte tokens.
        cut = client.completions.create(prompt=prompt, stop=["界"], **kwargs).choices[0]  # type: ignore[call-overload]
        streamed_cut = "".join(c.choices[0].text for c in client.completions.create(  # type: ignore[call-overload]
            prompt=prompt, stop=["界"], stream=True, **kwargs) if c.choices)
        assert cut.finish_reason == "stop" and cut.text.strip() == "世" and streamed_cut == cut.text
