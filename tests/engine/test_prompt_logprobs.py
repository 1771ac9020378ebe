"""Prompt log-probabilities (``SamplingParams.prompt_logprobs``) equal transformers' teacher-forced
log_softmax: batched prompts of different lengths, chunked prefill, after same-tenant prefix-cache
hits, under preemption, with several choices; and the parameter's validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kvfence.engine.core.outputs import Logprob
from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv.shared_prefill import SharedPrefill
from kvfence.engine.llm import LLM, CompletionOutput
from kvfence.engine.sampling.prompt_logprobs import PromptScores, append_prompt_logprobs, positions_to_score
from kvfence.engine.sampling.sampling_params import MAX_LOGPROBS, SamplingParams
from kvfence.errors import InvalidParameterError
from kvfence.scope import TenantIdentity
from tests.engine.tiny_models import build_tiny_model

TOLERANCE = 2e-4  # nats, float32
TOP = 3
ALICE = TenantIdentity(organization="alice")
BOB = TenantIdentity(organization="bob")

ARCHS: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {"sliding_window": 24},  # prompts longer than the window
}


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in (2, 9, 31, 57, 17)]


@pytest.fixture(scope="module", params=list(ARCHS))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[torch.Tensor]]:
    """A tiny random model and transformers' log_softmax over each prompt (row i scores token i + 1)."""
    import transformers

    model_dir = build_tiny_model(tmp_path_factory.mktemp(request.param), request.param, **ARCHS[request.param])
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        refs = [torch.log_softmax(model(torch.tensor([p])).logits[0].float(), dim=-1) for p in _prompts()]
    return model_dir, refs


def _check(out: CompletionOutput, prompt: list[int], ref: torch.Tensor, num_top: int) -> None:
    entries = out.prompt_logprobs
    assert entries is not None and len(entries) == len(prompt)  # every position, none twice
    assert entries[0] is None
    for i in range(1, len(prompt)):
        entry = entries[i]
        assert entry is not None
        token = prompt[i]
        assert next(iter(entry)) == token  # the prompt's own token first
        row = ref[i - 1]
        ordered = row.sort(descending=True).values
        assert abs(entry[token].logprob - row[token].item()) < TOLERANCE
        assert abs(ordered[entry[token].rank - 1] - row[token]) < TOLERANCE  # its rank (ties tolerated)
        top = {t: lp for t, lp in entry.items() if t != token or lp.rank <= num_top}
        assert len(top) == num_top  # the top-n, the prompt's token among them when it is one
        for tid, lp in top.items():
            assert 1 <= lp.rank <= num_top
            assert abs(lp.logprob - row[tid].item()) < TOLERANCE
            assert abs(ordered[lp.rank - 1] - row[tid]) < TOLERANCE
        assert all(isinstance(lp, Logprob) and isinstance(lp.decoded_token, str) for lp in entry.values())


def _llm(model_dir: Path, **kwargs: Any) -> LLM:
    defaults: dict[str, Any] = {"kv_cache_tokens": 4096, "page_size": 8, "device": "cpu"}
    return LLM(model=str(model_dir), **{**defaults, **kwargs})


def _params(**kwargs: Any) -> SamplingParams:
    return SamplingParams(**{"max_tokens": 3, "temperature": 0.0, "ignore_eos": True, "prompt_logprobs": TOP, **kwargs})


def test_batch_of_different_lengths_matches_transformers(tiny: tuple[Path, list[torch.Tensor]]) -> None:
    model_dir, refs = tiny
    prompts = _prompts()
    outs = _llm(model_dir).generate(prompts, _params())
    for out, prompt, ref in zip(outs, prompts, refs, strict=True):
        _check(out, prompt, ref, TOP)
        assert len(out.token_ids) == 3


def test_chunked_prefill_scores_every_position_once(tiny: tuple[Path, list[torch.Tensor]]) -> None:
    model_dir, refs = tiny
    prompts = _prompts()
    llm = _llm(model_dir, max_num_batched_tokens=11, max_prefill_chunk=7)  # prompts split in many chunks
    outs = llm.generate(prompts, _params(prompt_logprobs=0))
    for out, prompt, ref in zip(outs, prompts, refs, strict=True):
        _check(out, prompt, ref, 0)


def test_after_a_same_tenant_cache_hit_still_complete_and_equal(tiny: tuple[Path, list[torch.Tensor]]) -> None:
    model_dir, refs = tiny
    prompts = _prompts()
    llm = _llm(model_dir)
    plain = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    llm.generate(prompts, plain, tenant=ALICE)  # seals the prompts' pages in alice's scope
    hits_before = sum(llm.engine.stats().prefix_hit_tokens_by_scope.values())
    outs = llm.generate(prompts, _params(), tenant=ALICE)
    for out, prompt, ref in zip(outs, prompts, refs, strict=True):
        _check(out, prompt, ref, TOP)
        assert out.num_cached_tokens == 0  # it computed every position: it took no prefix-cache hit
    assert sum(llm.engine.stats().prefix_hit_tokens_by_scope.values()) == hits_before
    # The cache is intact and still scoped: alice hits it again, bob does not.
    again = llm.generate(prompts, plain, tenant=ALICE)
    assert [o.num_cached_tokens for o in again] == [((len(p) - 1) // 8) * 8 for p in prompts]
    assert all(o.num_cached_tokens == 0 for o in llm.generate(prompts, plain, tenant=BOB))


def test_preemption_by_recompute_adds_no_duplicate(tiny: tuple[Path, list[torch.Tensor]]) -> None:
    model_dir, refs = tiny
    prompts = _prompts()
    llm = _llm(model_dir, max_model_len="auto", kv_cache_tokens=96, max_num_batched_tokens=16, max_prefill_chunk=16)
    outs = llm.generate(prompts, _params(max_tokens=12))
    assert llm.engine.stats().num_preemptions > 0
    for out, prompt, ref in zip(outs, prompts, refs, strict=True):
        _check(out, prompt, ref, TOP)
    assert llm.engine.pool_is_zero()


def test_choices_share_the_prompt_scores(tiny: tuple[Path, list[torch.Tensor]]) -> None:
    model_dir, refs = tiny
    prompts = _prompts()[2:4]
    llm = _llm(model_dir)
    outs = llm.generate(prompts, _params(temperature=1.0, n=3, best_of=4, seed=5))
    for out, prompt, ref in zip(outs, prompts, refs[2:4], strict=True):
        _check(out, prompt, ref, TOP)
        assert len(out.outputs) == 3


def test_off_by_default_and_generation_unchanged(tiny: tuple[Path, list[torch.Tensor]]) -> None:
    model_dir, _ = tiny
    prompts = _prompts()
    llm = _llm(model_dir)
    plain = llm.generate(prompts, SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True))
    scored = llm.generate(prompts, _params(max_tokens=5))
    assert all(o.prompt_logprobs is None for o in plain)
    assert [o.token_ids for o in plain] == [o.token_ids for o in scored]


@pytest.mark.parametrize("value", [-1, MAX_LOGPROBS + 1, True, 1.5, "2"])
def test_bad_values_are_refused(value: Any) -> None:
    with pytest.raises(InvalidParameterError, match="prompt_logprobs") as info:
        SamplingParams(prompt_logprobs=value)
    assert info.value.param == "prompt_logprobs"


def test_bounds_are_accepted() -> None:
    assert SamplingParams(prompt_logprobs=0).prompt_logprobs == 0
    assert SamplingParams(prompt_logprobs=MAX_LOGPROBS).prompt_logprobs == MAX_LOGPROBS


# ---- which positions a chunk scores, and the order check (pure logic) ------------------------------


def _seq(num_prompt: int, num_scored: int, *, generated: int = 0) -> Sequence:
    seq = Sequence("r", list(range(1, num_prompt + 1)), b"scope", SamplingParams(prompt_logprobs=0))
    assert seq.prompt_logprobs is not None
    seq.prompt_logprobs.extend({t: Logprob(-1.0, 1)} for t in range(2, num_scored + 1))  # prompt tokens 1..scored-1
    seq.token_ids.extend(range(900, 900 + generated))
    return seq


def test_positions_to_score_per_chunk() -> None:
    assert positions_to_score(_seq(10, 1), 0, 4) == range(0, 4)  # scores prompt tokens 1..4
    assert positions_to_score(_seq(10, 5), 4, 4) == range(4, 8)
    assert positions_to_score(_seq(10, 9), 8, 2) == range(8, 9)  # position 9 predicts the first generated token
    assert positions_to_score(_seq(10, 10, generated=1), 10, 1) == range(0)  # decode: nothing
    # recompute after preemption: the chunk restarts at 0, only positions not scored yet are scored
    assert positions_to_score(_seq(10, 6, generated=3), 0, 8) == range(5, 8)
    assert positions_to_score(_seq(10, 10, generated=3), 0, 13) == range(0)
    assert positions_to_score(_seq(1, 1), 0, 1) == range(0)  # a one-token prompt has only its null entry
    plain = Sequence("p", [1, 2, 3], b"scope", SamplingParams())
    assert plain.prompt_logprobs is None and positions_to_score(plain, 0, 3) == range(0)


def test_scores_must_continue_where_the_entries_end() -> None:
    entries: list[dict[int, Logprob] | None] = [None]
    scores = PromptScores(1, [5, 6], [-1.0, -2.0], [3, 1], [[7], [6]], [[-0.5], [-2.0]])
    append_prompt_logprobs(entries, scores, str)
    assert entries[1] == {5: Logprob(-1.0, 3, "5"), 7: Logprob(-0.5, 1, "7")}
    assert entries[2] == {6: Logprob(-2.0, 1, "6")}  # the prompt's token is its own top one: listed once
    with pytest.raises(RuntimeError, match="out of order"):
        append_prompt_logprobs(entries, scores, str)  # a duplicate
    with pytest.raises(RuntimeError, match="out of order"):
        append_prompt_logprobs(entries, PromptScores(5, [1], [-1.0], [1], [[]], [[]]), str)  # a gap


def test_a_scoring_request_is_never_held_behind_an_identical_prompt() -> None:
    """It maps no prefix-cache page, so waiting for a leader's pages would only delay it; a plain
    request with the same prompt still waits, and a scoring request may lead others."""
    shared = SharedPrefill(page_size=4)
    scope, prompt = b"S" * 32, list(range(10, 30))
    assert not shared.hold(Sequence("lead", prompt, scope, SamplingParams(max_tokens=2)))
    assert not shared.hold(Sequence("score", prompt, scope, SamplingParams(max_tokens=2, prompt_logprobs=0)))
    assert shared.hold(Sequence("plain", prompt, scope, SamplingParams(max_tokens=2)))
    other = SharedPrefill(page_size=4)
    assert not other.hold(Sequence("score-lead", prompt, scope, SamplingParams(max_tokens=2, prompt_logprobs=1)))
    assert other.hold(Sequence("follower", prompt, scope, SamplingParams(max_tokens=2)))
