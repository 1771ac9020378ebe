"""The official `openai` client (sync, async, streaming) against the real server."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.server.conftest import MAX_MODEL_LEN, RunningServer

GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}


def _client(server: RunningServer, who: str = "alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.keys[who], max_retries=0, timeout=60)


def _async_client(server: RunningServer, who: str = "alice") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=server.keys[who], max_retries=0, timeout=60)


def _model(server: RunningServer) -> str:
    return str(server.app.state.serving.model.public_name)


def test_models_and_capacity(server: RunningServer) -> None:
    with _client(server) as client:
        models = client.models.list()
        assert client.models.retrieve(_model(server)).id == _model(server)
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("no-such-model")
    assert [m.id for m in models.data] == [_model(server)]
    cap = httpx.get(server.base_url + "/v1/capacity").json()  # readable without a key
    assert cap["max_model_len"] == MAX_MODEL_LEN
    assert cap["pool_tokens"] >= cap["max_model_len"] and cap["pool_tokens"] == cap["num_pages"] * cap["page_size"]
    assert cap["cache_scope"] == "org" and cap["scrub"] is True and cap["random_weights"] is True


def test_sync_completion_and_stream_agree(server: RunningServer) -> None:
    with _client(server) as client:
        full = client.completions.create(model=_model(server), prompt="The quick brown fox", max_tokens=12, **GREEDY)
        choice = full.choices[0]
        assert choice.finish_reason == "length" and choice.index == 0
        assert full.usage is not None
        assert full.usage.completion_tokens == 12
        assert full.usage.prompt_tokens > 0
        assert full.usage.total_tokens == full.usage.prompt_tokens + 12
        assert full.usage.prompt_tokens_details is not None
        assert full.id.startswith("cmpl-") and full.object == "text_completion"

        chunks = list(client.completions.create(model=_model(server), prompt="The quick brown fox", max_tokens=12,
                                                stream=True, stream_options={"include_usage": True}, **GREEDY))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == choice.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 12


def test_async_chat_and_stream_agree(server: RunningServer) -> None:
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]

    async def run() -> tuple[str, str, object]:
        async with _async_client(server, "bob") as client:
            full = await client.chat.completions.create(model=_model(server), messages=messages,  # type: ignore[arg-type]
                                                        max_completion_tokens=10, **GREEDY)
            stream = await client.chat.completions.create(model=_model(server), messages=messages,  # type: ignore[arg-type]
                                                          max_tokens=10, stream=True,
                                                          stream_options={"include_usage": True}, **GREEDY)
            parts, roles, usage = [], [], None
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                for c in chunk.choices:
                    if c.delta.role:
                        roles.append(c.delta.role)
                    parts.append(c.delta.content or "")
            assert roles == ["assistant"]
            assert full.choices[0].message.role == "assistant"
            assert full.choices[0].finish_reason == "length"
            return full.choices[0].message.content or "", "".join(parts), usage

    full_text, streamed, usage = asyncio.run(run())
    assert streamed == full_text
    assert getattr(usage, "completion_tokens", None) == 10


def test_chat_default_max_tokens_is_the_rest_of_the_context(server: RunningServer) -> None:
    tok = server.app.state.serving.model.tokenizer
    content = "x" * 1000
    num_prompt = len(tok.encode(tok.apply_chat_template([{"role": "user", "content": content}]),
                                add_special_tokens=False))
    room = MAX_MODEL_LEN - num_prompt
    assert 0 < room < 40
    with _client(server) as client:
        r = client.chat.completions.create(model=_model(server), messages=[{"role": "user", "content": content}],
                                           **GREEDY)
    assert r.usage is not None
    assert r.usage.prompt_tokens == num_prompt and r.usage.completion_tokens == room
    assert r.choices[0].finish_reason == "length"


def test_logprobs(server: RunningServer) -> None:
    with _client(server) as client:
        r = client.completions.create(model=_model(server), prompt="abc", max_tokens=4, logprobs=3, **GREEDY)
        lp = r.choices[0].logprobs
        assert lp is not None and lp.tokens is not None and lp.top_logprobs is not None
        assert len(lp.tokens) == 4 and len(lp.token_logprobs or []) == 4 and len(lp.top_logprobs) == 4
        # Greedy: the chosen token is the most likely one.
        for chosen, top in zip(lp.token_logprobs or [], lp.top_logprobs, strict=True):
            assert len(top) <= 3 and chosen == pytest.approx(max(top.values()))
        c = client.chat.completions.create(model=_model(server), messages=[{"role": "user", "content": "x"}],
                                           max_tokens=3, logprobs=True, top_logprobs=2, **GREEDY)
        content = c.choices[0].logprobs.content  # type: ignore[union-attr]
        assert content is not None and len(content) == 3
        assert all(len(t.top_logprobs) == 2 and t.bytes is not None for t in content)


def test_token_prompts_batches_seed_and_stop(server: RunningServer) -> None:
    model = _model(server)
    with _client(server) as client:
        ids = client.completions.create(model=model, prompt=[1, 65, 66, 67], max_tokens=5, **GREEDY)
        batch = client.completions.create(model=model, prompt=["first prompt", "second one"], max_tokens=5, **GREEDY)
        assert sorted(c.index for c in batch.choices) == [0, 1]
        assert batch.usage is not None and batch.usage.completion_tokens == 10
        assert ids.choices[0].finish_reason == "length"
        streamed: dict[int, str] = {0: "", 1: ""}
        for chunk in client.completions.create(model=model, prompt=["first prompt", "second one"], max_tokens=5,
                                               stream=True, **GREEDY):
            for c in chunk.choices:
                streamed[c.index] += c.text
        assert streamed == {c.index: c.text for c in batch.choices}

        seeded = [client.completions.create(model=model, prompt="seeded", max_tokens=8, temperature=1.0, seed=7,
                                            extra_body={"ignore_eos": True}).choices[0].text for _ in range(2)]
        assert seeded[0] == seeded[1]

        base = client.completions.create(model=model, prompt="stop test", max_tokens=16, **GREEDY).choices[0].text
        stop = next((base[i:i + 1] for i in range(2, len(base)) if base[i:i + 1] not in base[:i]), None)
        if stop is not None:
            stopped = client.completions.create(model=model, prompt="stop test", max_tokens=16, stop=[stop], **GREEDY)
            assert stopped.choices[0].finish_reason == "stop"
            assert stopped.choices[0].text == base[: base.index(stop)]


def test_prefix_cache_is_shared_within_an_org_only(server: RunningServer) -> None:
    """I1/I5 through the API: cached_tokens > 0 only for a prompt the same organization sent before."""
    model = _model(server)
    prompt = "A long shared prefix that spans several KV pages. " * 8
    with _client(server, "alice") as alice, _client(server, "alice2") as alice2, _client(server, "bob") as bob:
        first = alice.completions.create(model=model, prompt=prompt, max_tokens=1, **GREEDY)
        assert first.usage is not None and first.usage.prompt_tokens_details is not None
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        other_org = bob.completions.create(model=model, prompt=prompt, max_tokens=1, **GREEDY)
        assert other_org.usage is not None and other_org.usage.prompt_tokens_details is not None
        assert other_org.usage.prompt_tokens_details.cached_tokens == 0
        same_org = alice2.completions.create(model=model, prompt=prompt, max_tokens=1, **GREEDY)
        assert same_org.usage is not None and same_org.usage.prompt_tokens_details is not None
        assert same_org.usage.prompt_tokens_details.cached_tokens > 0
        # A cache_salt narrows the scope: the same org with a new salt misses.
        salted = alice2.completions.create(model=model, prompt=prompt, max_tokens=1,
                                           temperature=0, extra_body={"cache_salt": "fresh-salt"})
        assert salted.usage is not None and salted.usage.prompt_tokens_details is not None
        assert salted.usage.prompt_tokens_details.cached_tokens == 0
