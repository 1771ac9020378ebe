"""Scoring text through the official ``openai`` client: completions ``echo`` + ``logprobs`` (as
lm-evaluation-harness's ``local-completions`` sends it), ``max_tokens: 0`` with ``echo``, and vLLM's
``prompt_logprobs`` on both endpoints, streamed and not; every score equals transformers'
teacher-forced log_softmax of the same tiny random model (chunked prefill on: a small token budget).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import torch

from kvfence.server.openai.prepare import chat_prompt
from tests.engine.tiny_models import build_tiny_model
from tests.server.conftest import RunningServer, engine_factory, serve

TOLERANCE = 2e-4  # nats, float32
PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog", "a, b", "Scoring text is what lm-eval does here."]
CHAT = [{"role": "user", "content": "Rate this sentence."}]


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Any]]:
    """A server on a tiny model with a small token budget (prompts prefill in several chunks), and
    a function giving transformers' log_softmax rows of a prompt's token ids."""
    import transformers

    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny"), "llama", max_position_embeddings=2048)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    def reference(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)  # row i scores i + 1

    factory = engine_factory(model=str(model_dir), max_num_batched_tokens=12, max_prefill_chunk=8, page_size=4)
    with serve(tmp_path_factory.mktemp("server"), factory=factory) as running:
        yield running, reference


def _client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys["alice"], max_retries=0, timeout=120)


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def _ids(server: RunningServer, prompt: str) -> list[int]:
    return list(server.app.state.serving.model.tokenizer.encode(prompt))


def _check_echo(choice: Any, prompt: str, ids: list[int], ref: torch.Tensor, num_generated: int) -> None:
    lp = choice.logprobs
    n = len(ids)
    assert choice.text.startswith(prompt)
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n + num_generated
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for i in range(1, n):
        assert abs(lp.token_logprobs[i] - ref[i - 1, ids[i]].item()) < TOLERANCE
        assert abs(max(lp.top_logprobs[i].values()) - ref[i - 1].max().item()) < TOLERANCE  # logprobs=1: the top one
    # text_offset indexes the echoed text: each prompt token's text sits at its offset (BOS takes no room)
    offsets = lp.text_offset
    assert offsets == sorted(offsets) and offsets[0] == 0
    for i in range(1, n):
        assert choice.text[offsets[i]:].startswith(lp.tokens[i])
    assert all(o >= len(prompt) for o in offsets[n:])  # generated tokens follow the echo
    if num_generated:
        assert offsets[n] == len(prompt)


def test_echo_logprobs_like_lm_eval_harness(scored: tuple[RunningServer, Any]) -> None:
    server, reference = scored
    with _client(server) as client:
        out = client.completions.create(model=_model(server), prompt=PROMPTS, echo=True, logprobs=1, max_tokens=1,
                                        temperature=0)
    assert len(out.choices) == len(PROMPTS)
    total = 0
    for choice, prompt in zip(sorted(out.choices, key=lambda c: c.index), PROMPTS, strict=True):
        ids = _ids(server, prompt)
        total += len(ids)
        ref = reference(ids)
        _check_echo(choice, prompt, ids, ref, 1)
        # the generated token is greedy: its logprob is the top one of the last prompt position
        assert abs(choice.logprobs.token_logprobs[-1] - ref[-1].max().item()) < TOLERANCE
    assert out.usage is not None and out.usage.prompt_tokens == total and out.usage.completion_tokens == len(PROMPTS)


def test_max_tokens_zero_with_echo_scores_the_prompt_only(scored: tuple[RunningServer, Any]) -> None:
    server, reference = scored
    prompt = PROMPTS[1]
    ids = _ids(server, prompt)
    with _client(server) as client:
        out = client.completions.create(model=_model(server), prompt=prompt, echo=True, logprobs=1, max_tokens=0)
        by_ids = client.completions.create(model=_model(server), prompt=ids, echo=True, logprobs=0, max_tokens=0)
    choice = out.choices[0]
    assert choice.text == prompt and choice.finish_reason == "length"
    _check_echo(choice, prompt, ids, reference(ids), 0)
    assert out.usage is not None and out.usage.completion_tokens == 0 and out.usage.prompt_tokens == len(ids)
    # token ids: the echo is their decoded text, BOS included; offsets still index it
    echoed = by_ids.choices[0]
    assert echoed.text.endswith(prompt) and echoed.logprobs.top_logprobs[1] == {}
    assert echoed.logprobs.token_logprobs[1:] == choice.logprobs.token_logprobs[1:]
    assert all(echoed.text[o:].startswith(t) for o, t in zip(echoed.logprobs.text_offset, echoed.logprobs.tokens,
                                                              strict=True))


def test_text_offsets_of_multibyte_characters(scored: tuple[RunningServer, Any]) -> None:
    server, reference = scored
    prompt = "héllo 日本 😀!"  # byte-level tokens: several per character
    ids = _ids(server, prompt)
    assert len(ids) > len(prompt) + 1
    with _client(server) as client:
        out = client.completions.create(model=_model(server), prompt=prompt, echo=True, logprobs=0, max_tokens=0)
    lp = out.choices[0].logprobs
    ref = reference(ids)
    assert all(abs(lp.token_logprobs[i] - ref[i - 1, ids[i]].item()) < TOLERANCE for i in range(1, len(ids)))
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[-1] < len(prompt)
    for offset, token in zip(lp.text_offset[1:], lp.tokens[1:], strict=True):
        if token != "\ufffd":  # a whole character: it sits at its offset
            assert prompt[offset:].startswith(token)
        else:  # part of one: its offset is that character's
            assert len(prompt[offset].encode()) > 1
    assert lp.text_offset[-1] == len(prompt) - 1  # "!"


def test_prompt_of_the_whole_context_is_scored_with_max_tokens_zero(scored: tuple[RunningServer, Any]) -> None:
    """max_tokens 0 samples nothing: a prompt of exactly max_model_len tokens is scored (lm-eval's shape);
    token-id-list prompts in a batch, with n, each choice the whole prompt and no generated token."""
    server, reference = scored
    max_len = int(server.app.state.serving.model.capacity.max_model_len)
    full, short = [65 + i % 50 for i in range(max_len)], [70, 71, 72, 73, 74]
    body = {"prompt": [full, short], "echo": True, "logprobs": 0, "max_tokens": 0, "n": 2}
    r = httpx.post(server.base_url + "/v1/completions", headers=server.headers("alice"), timeout=300, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    for c in out["choices"]:
        ids = full if c["index"] < 2 else short
        assert c["finish_reason"] == "length"
        assert len(c["logprobs"]["tokens"]) == len(ids)  # the prompt's tokens, none generated
        ref = reference(ids)
        got = c["logprobs"]["token_logprobs"]
        assert got[0] is None
        assert all(abs(got[i] - float(ref[i - 1, ids[i]])) < TOLERANCE for i in range(1, len(ids)))
    assert out["usage"]["completion_tokens"] == 0
    assert out["usage"]["prompt_tokens"] == max_len + len(short)  # each prompt once, whatever its n
    body = {"prompt": [65] * (max_len + 1), "echo": True, "logprobs": 0, "max_tokens": 0}
    r = httpx.post(server.base_url + "/v1/completions", headers=server.headers("alice"), timeout=60, json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text


def test_streamed_echo_logprobs_equal_the_whole_answer(scored: tuple[RunningServer, Any]) -> None:
    server, _ = scored
    kwargs: dict[str, Any] = {"model": _model(server), "prompt": PROMPTS[:2], "echo": True, "logprobs": 2,
                              "max_tokens": 3, "temperature": 0, "extra_body": {"ignore_eos": True}}
    with _client(server) as client:
        whole = client.completions.create(**kwargs)
        stream = client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
        chunks = list(stream)
    for choice in whole.choices:
        parts = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == choice.index]
        assert "".join(p.text for p in parts) == choice.text
        for field in ("tokens", "token_logprobs", "text_offset", "top_logprobs"):
            streamed = [x for p in parts if p.logprobs is not None for x in getattr(p.logprobs, field)]
            assert streamed == getattr(choice.logprobs, field), field
        assert parts[-1].finish_reason == choice.finish_reason == "length"
    usage = chunks[-1].usage
    assert usage is not None and whole.usage is not None and usage.prompt_tokens == whole.usage.prompt_tokens


def _check_vllm_shape(entries: list[Any], ids: list[int], ref: torch.Tensor, num_top: int) -> None:
    assert len(entries) == len(ids) and entries[0] is None
    for i in range(1, len(ids)):
        entry = {int(k): v for k, v in entries[i].items()}
        own = entry[ids[i]]
        assert abs(own["logprob"] - ref[i - 1, ids[i]].item()) < TOLERANCE
        assert own["rank"] == int((ref[i - 1] > ref[i - 1, ids[i]]).sum()) + 1
        assert isinstance(own["decoded_token"], str)
        top = [v for t, v in entry.items() if t != ids[i] or v["rank"] <= num_top]
        assert sorted(v["rank"] for v in top) == list(range(1, num_top + 1))
        for v in top:
            assert abs(v["logprob"] - ref[i - 1].sort(descending=True).values[v["rank"] - 1].item()) < TOLERANCE


def test_prompt_logprobs_on_completions_token_ids_and_choices(scored: tuple[RunningServer, Any]) -> None:
    server, reference = scored
    ids = _ids(server, PROMPTS[3])
    with _client(server) as client:
        out = client.completions.create(model=_model(server), prompt=ids, max_tokens=2, n=2, temperature=1.0, seed=3,
                                        extra_body={"prompt_logprobs": 2})
    assert len(out.choices) == 2
    for choice in out.choices:
        _check_vllm_shape(choice.prompt_logprobs, ids, reference(ids), 2)  # type: ignore[attr-defined]
        assert choice.logprobs is None
    assert out.usage is not None and out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == 4


def test_prompt_logprobs_on_chat(scored: tuple[RunningServer, Any]) -> None:
    server, reference = scored
    ids = chat_prompt(CHAT, True, server.app.state.serving.model)
    with _client(server) as client:
        out = client.chat.completions.create(model=_model(server), messages=CHAT, max_tokens=2,  # type: ignore[arg-type]
                                             extra_body={"prompt_logprobs": 0})
        chunks = list(client.chat.completions.create(model=_model(server), messages=CHAT, max_tokens=2,  # type: ignore[arg-type]
                                                     stream=True, extra_body={"prompt_logprobs": 0}))
    _check_vllm_shape(out.prompt_logprobs, ids, reference(ids), 0)  # type: ignore[attr-defined]
    assert out.usage is not None and out.usage.prompt_tokens == len(ids)
    carrying = [c for c in chunks if getattr(c, "prompt_logprobs", None) is not None]
    assert len(carrying) == 1 and carrying[0].prompt_logprobs == out.prompt_logprobs  # type: ignore[attr-defined]


def test_streamed_prompt_logprobs_on_completions(scored: tuple[RunningServer, Any]) -> None:
    server, reference = scored
    ids = _ids(server, PROMPTS[1])
    with _client(server) as client:
        chunks = list(client.completions.create(model=_model(server), prompt=PROMPTS[1], max_tokens=3, n=2,
                                                temperature=1.0, stream=True, extra_body={"prompt_logprobs": 1}))
    for index in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == index]
        carrying = [c for c in mine if getattr(c, "prompt_logprobs", None) is not None]
        assert len(carrying) == 1 and carrying[0] is mine[0]  # the choice's first chunk
        _check_vllm_shape(carrying[0].prompt_logprobs, ids, reference(ids), 1)  # type: ignore[attr-defined]


def test_echo_and_prompt_logprobs_together_each_keep_their_top_n(scored: tuple[RunningServer, Any]) -> None:
    server, reference = scored
    prompt = PROMPTS[2]
    ids = _ids(server, prompt)
    kwargs: dict[str, Any] = {"model": _model(server), "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0,
                              "extra_body": {"prompt_logprobs": 3}}
    with _client(server) as client:
        out = client.completions.create(**kwargs)
        chunks = list(client.completions.create(stream=True, **kwargs))
    choice = out.choices[0]
    _check_echo(choice, prompt, ids, reference(ids), 0)
    assert all(len(top) == 1 for top in choice.logprobs.top_logprobs[1:])
    _check_vllm_shape(choice.prompt_logprobs, ids, reference(ids), 3)  # type: ignore[attr-defined]
    # streamed: the echo, its scores and prompt_logprobs in the first chunk, then the end, nothing generated
    assert [c.choices[0].text for c in chunks] == [prompt, ""]
    assert chunks[0].choices[0].logprobs.tokens == choice.logprobs.tokens
    assert chunks[0].choices[0].prompt_logprobs == choice.prompt_logprobs  # type: ignore[attr-defined]
    assert chunks[-1].choices[0].finish_reason == "length"


def test_scores_after_a_same_tenant_cache_hit(scored: tuple[RunningServer, Any]) -> None:
    server, reference = scored
    prompt = PROMPTS[3] * 2
    ids = _ids(server, prompt)
    with _client(server) as client:
        client.completions.create(model=_model(server), prompt=prompt, max_tokens=1)  # caches alice's prompt pages
        warm = client.completions.create(model=_model(server), prompt=prompt, max_tokens=1)
        assert warm.usage is not None and warm.usage.prompt_tokens_details is not None
        assert warm.usage.prompt_tokens_details.cached_tokens > 0  # a hit for a plain request
        out = client.completions.create(model=_model(server), prompt=prompt, echo=True, logprobs=1, max_tokens=0)
    _check_echo(out.choices[0], prompt, ids, reference(ids), 0)  # complete: every position was computed


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_completion_tokens": 0, "logprobs": 1}, "max_completion_tokens"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": -1}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "echo": True, "logprobs": 21}, "logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 0}, "max_tokens"),
    ("/v1/chat/completions", {"messages": CHAT, "prompt_logprobs": -2}, "prompt_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "prompt_logprobs": 99}, "prompt_logprobs"),
])
def test_bad_values_are_a_400(scored: tuple[RunningServer, Any], path: str, body: dict[str, Any], param: str) -> None:
    server, _ = scored
    r = httpx.post(server.base_url + path, headers=server.headers("alice"), timeout=60,
                   content=json.dumps(body).encode())
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_nothing_is_left_behind(scored: tuple[RunningServer, Any]) -> None:
    server, _ = scored
    stats = server.wait_idle()
    assert stats.num_running == 0 and stats.num_waiting == 0
    assert server.engine.pool_is_zero()
