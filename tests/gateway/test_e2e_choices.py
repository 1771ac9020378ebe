"""Several choices per request (``n`` / ``best_of``) through a real gateway in front of a real
``kvfence serve`` process, protection on, the official ``openai`` client as the caller.

The built-in model is random, so it never writes a placeholder by itself; ``echo`` makes each choice
start with the prompt as the engine received it (placeholders in), which the gateway must restore in
every choice of the stream separately. Each choice's text is compared with what the engine answers
directly for the pseudonymised prompt (same seed: same tokens).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from kvfence.gateway.policy.tenants import hash_api_key
from tests.gateway.conftest import Gateway, KvfenceServe, Process

KEY = "kvf-gw-choices-key"
MODEL = "kvfence-builtin-random-llama"
EMAIL = "maria.lopez@northwind.com"
POOL_TOKENS = 1024


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    proc = KvfenceServe(tmp_path_factory.mktemp("choices-serve"), kv_cache_tokens=POOL_TOKENS)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def gateway(engine: Process, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    from kvfence.engine.runner.default_model import ensure_default_model

    tmp = tmp_path_factory.mktemp("choices-gw")
    policy: dict[str, Any] = {
        "gateway": {"audit_log": f"sqlite:///{tmp}/audit.db", "capacity_refresh_s": 0},
        "data_classes": [{"name": "internal", "allowed_tiers": ["on_prem"]}],
        "backends": [{"name": "kvfence", "url": f"http://127.0.0.1:{engine.port}/v1", "tier": "on_prem",
                      "models": ["tiny"], "model_map": {"tiny": MODEL}, "accepts_cache_salt": True,
                      "capacity": "kvfence", "tokenizer": str(ensure_default_model())}],
        "tenants": [{"name": "acme-key", "key_sha256": hash_api_key(KEY), "organization": "acme",
                     "default_class": "internal"}],
    }
    gw = Gateway(policy, tmp, env={"KVFENCE_GATEWAY_SECRET": "choices-test-secret-0123"})
    yield gw
    gw.stop()


def _texts_by_index(chunks: Iterator[Any]) -> dict[int, str]:
    texts: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            piece = choice.text if hasattr(choice, "text") else (choice.delta.content or "")
            texts.setdefault(choice.index, []).append(piece or "")
    return {index: "".join(parts) for index, parts in texts.items()}


def test_streamed_choices_are_restored_per_index(gateway: Gateway, engine: Process) -> None:
    prompt = f"Please write to {EMAIL} about the invoice"
    params: dict[str, Any] = {"n": 2, "max_tokens": 12, "temperature": 1.0, "seed": 1234, "echo": True}
    via = openai.OpenAI(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=60)
    direct = openai.OpenAI(base_url=f"http://127.0.0.1:{engine.port}/v1", api_key="none", max_retries=0, timeout=60)
    try:
        got = _texts_by_index(via.completions.create(model="tiny", prompt=prompt, stream=True, **params))
        sent = prompt.replace(EMAIL, "<EMAIL_1>")  # what the gateway forwards instead
        want = _texts_by_index(direct.completions.create(model=MODEL, prompt=sent, stream=True, **params))
    finally:
        via.close()
        direct.close()
    assert sorted(got) == [0, 1]
    assert want[0] != want[1]  # two different samples, so a mix-up of indexes would show
    for index in (0, 1):
        assert want[index].startswith(sent)
        assert got[index] == want[index].replace("<EMAIL_1>", EMAIL)


def test_streamed_chat_choices_arrive_whole(gateway: Gateway, engine: Process) -> None:
    messages = [{"role": "user", "content": f"Summarise the mail from {EMAIL}"}]
    sent = [{"role": "user", "content": "Summarise the mail from <EMAIL_1>"}]
    params: dict[str, Any] = {"n": 3, "max_tokens": 10, "temperature": 1.0, "seed": 99}
    via = openai.OpenAI(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=60)
    direct = openai.OpenAI(base_url=f"http://127.0.0.1:{engine.port}/v1", api_key="none", max_retries=0, timeout=60)
    try:
        got = _texts_by_index(via.chat.completions.create(model="tiny", messages=messages, stream=True, **params))
        want = _texts_by_index(direct.chat.completions.create(model=MODEL, messages=sent, stream=True, **params))
    finally:
        via.close()
        direct.close()
    assert sorted(got) == [0, 1, 2]
    assert got == {i: t.replace("<EMAIL_1>", EMAIL) for i, t in want.items()}


def test_choices_that_cannot_fit_the_pool_together_are_refused(gateway: Gateway) -> None:
    from kvfence.engine.runner.default_model import ensure_default_model
    from kvfence.gateway.admission.tokens import load_counter

    prompt = "the quarterly figures of the northern region " * 5  # ~225 tokens, byte-level
    tokens = load_counter(str(ensure_default_model())).count_text(prompt)  # the gateway's exact count
    most = (POOL_TOKENS - tokens) // 4  # kvfence's choices share the prompt: prompt + 4 x max_tokens
    via = openai.OpenAI(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=60)
    try:
        # (a margin below the exact fit: the engine counts whole pages, the gateway tokens)
        ok = via.completions.create(model="tiny", prompt=prompt, max_tokens=most - 40, n=4)
        assert len(ok.choices) == 4
        with pytest.raises(openai.BadRequestError) as too_long:
            via.completions.create(model="tiny", prompt=prompt, max_tokens=most + 1, n=4)
        with pytest.raises(openai.BadRequestError) as no_room:
            via.completions.create(model="tiny", prompt="hello there", max_tokens=200, n=8)
    finally:
        via.close()
    # refused by the gateway's cap (the engine's own I3 check words it differently): nothing forwarded
    assert too_long.value.code == no_room.value.code == "context_length_exceeded"
    assert f"prompt + 4 x max_tokens ({most + 1}), its 4 choices (n / best_of) at once" in str(too_long.value)
    assert "n=8 choices of max_tokens=200 leave no room for a prompt" in str(no_room.value)


def test_prompt_scoring_passes_through(gateway: Gateway, engine: Process) -> None:
    """lm-evaluation-harness's loglikelihood request (echo + logprobs, max_tokens 0) through the
    gateway gets the same prompt log-probabilities as the engine gives directly."""
    prompt = "The quick brown fox jumps over the lazy dog"
    params: dict[str, Any] = {"echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0}
    via = openai.OpenAI(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=60)
    direct = openai.OpenAI(base_url=f"http://127.0.0.1:{engine.port}/v1", api_key="none", max_retries=0, timeout=60)
    try:
        got = via.completions.create(model="tiny", prompt=prompt, **params)
        want = direct.completions.create(model=MODEL, prompt=prompt, **params)
    finally:
        via.close()
        direct.close()
    assert got.choices[0].text == prompt and got.usage is not None and got.usage.completion_tokens == 0
    assert got.choices[0].logprobs is not None and want.choices[0].logprobs is not None
    scores = got.choices[0].logprobs.token_logprobs
    assert scores is not None and scores[0] is None and len(scores) > 5
    assert all(isinstance(s, float) and s < 0 for s in scores[1:])
    assert scores == want.choices[0].logprobs.token_logprobs
