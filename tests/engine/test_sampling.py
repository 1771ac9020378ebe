"""Sampling through the engine: seeds, top-k/top-p, stop strings and ids, min_tokens, logprobs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def llm(default_model_dir: Path) -> LLM:
    return LLM(model=str(default_model_dir), kv_cache_tokens=4096, max_model_len="auto", device="cpu", cache_scope="request")


def _greedy(llm: LLM, n: int = 12) -> list[int]:
    return llm.generate(PROMPT, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True))[0].token_ids


def test_seeded_sampling_is_reproducible_and_batch_independent(llm: LLM) -> None:
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=1234, ignore_eos=True)
    alone = llm.generate(PROMPT, params)[0].token_ids
    batched = llm.generate([PROMPT, "some other prompt", PROMPT], [params, SamplingParams(max_tokens=5), params])
    assert batched[0].token_ids == alone == batched[2].token_ids
    other_seed = llm.generate(PROMPT, SamplingParams(max_tokens=12, temperature=1.0, seed=99, ignore_eos=True))[0]
    assert other_seed.token_ids != alone
    assert alone != _greedy(llm)  # temperature 1 on a random model does not collapse to greedy


def test_top_k_1_and_tiny_top_p_are_greedy(llm: LLM) -> None:
    greedy = _greedy(llm)
    top_k = llm.generate(PROMPT, SamplingParams(max_tokens=12, temperature=1.5, top_k=1, seed=5, ignore_eos=True))
    top_p = llm.generate(PROMPT, SamplingParams(max_tokens=12, temperature=1.5, top_p=1e-6, seed=5, ignore_eos=True))
    assert top_k[0].token_ids == greedy == top_p[0].token_ids


def test_stop_token_ids_end_the_completion(llm: LLM) -> None:
    greedy = _greedy(llm)
    stop_at = next(i for i in range(3, len(greedy)) if greedy[i] not in greedy[:i])
    out = llm.generate(PROMPT, SamplingParams(max_tokens=12, temperature=0, stop_token_ids=[greedy[stop_at]]))[0]
    assert out.token_ids == greedy[: stop_at + 1]
    assert out.finish_reason == "stop"
    # The stop token ends the answer but its text is not part of it (as in vLLM).
    assert out.text == llm.engine.tokenizer.decode(greedy[:stop_at])
    assert out.text != llm.engine.tokenizer.decode(greedy[: stop_at + 1])


def test_min_tokens_suppresses_early_stop(llm: LLM) -> None:
    greedy = _greedy(llm)
    first = greedy[0]
    out = llm.generate(PROMPT, SamplingParams(max_tokens=8, temperature=0, stop_token_ids=[first], min_tokens=4))[0]
    assert len(out.token_ids) >= 4
    assert first not in out.token_ids[:4]


def test_stop_string_truncates_text(llm: LLM) -> None:
    full = llm.generate(PROMPT, SamplingParams(max_tokens=24, temperature=0, ignore_eos=True))[0]
    text = full.text
    clean = [i for i in range(2, len(text) - 2) if "\ufffd" not in text[i : i + 2]]
    if not clean:
        pytest.skip("the random model produced no clean characters for a stop string")
    at = clean[0]
    stop = text[at : at + 2]
    at = text.index(stop)
    out = llm.generate(PROMPT, SamplingParams(max_tokens=24, temperature=0, stop=[stop], ignore_eos=True))[0]
    assert out.text == text[:at]
    assert out.finish_reason == "stop"
    assert len(out.token_ids) < 24


def test_logprobs(llm: LLM) -> None:
    out = llm.generate(PROMPT, SamplingParams(max_tokens=6, temperature=0, logprobs=3, ignore_eos=True))[0]
    assert out.logprobs is not None and len(out.logprobs) == 6
    for token, entry in zip(out.token_ids, out.logprobs, strict=True):
        assert next(iter(entry)) == token  # chosen token first
        assert 3 <= len(entry) <= 4
        assert all(v <= 0.0 for v in entry.values())
        assert entry[token] == max(entry.values())  # greedy picks the most likely token
        assert math.isfinite(entry[token])
    no_logprobs = llm.generate(PROMPT, SamplingParams(max_tokens=2, temperature=0))[0]
    assert no_logprobs.logprobs is None


def test_streamed_deltas_add_up_to_the_text(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("s", engine.tokenizer.encode(PROMPT), SamplingParams(max_tokens=20, temperature=0.8, seed=3), b"k" * 32)
    deltas, final = [], None
    while engine.has_unfinished_requests():
        for o in engine.step():
            deltas.append(o.delta_text)
            final = o
    assert final is not None and final.finished
    assert "".join(deltas) == final.text
    assert final.text == engine.tokenizer.decode(final.token_ids)


def test_logits_processors_see_the_output_so_far_and_steer_every_step(llm: LLM) -> None:
    forced = [65, 66, 67, 68, 69, 70]
    seen: list[list[int]] = []

    def force(output_token_ids, logits):  # type: ignore[no-untyped-def]
        seen.append(list(output_token_ids))
        logits.fill_(float("-inf"))
        logits[forced[len(output_token_ids)]] = 0.0
        return logits

    params = SamplingParams(max_tokens=len(forced), temperature=1.0, seed=3, ignore_eos=True, logits_processors=[force])
    plain = SamplingParams(max_tokens=len(forced), temperature=0, ignore_eos=True)
    out = llm.generate([PROMPT, PROMPT], [params, plain])
    assert out[0].token_ids == forced
    assert out[1].token_ids == _greedy(llm, len(forced)) != forced  # the other row of the batch is untouched
    assert seen == [forced[:i] for i in range(len(forced))]


def test_logits_processors_must_be_callables() -> None:
    with pytest.raises(Exception, match="logits_processors"):
        SamplingParams(logits_processors=[1])  # type: ignore[list-item]
