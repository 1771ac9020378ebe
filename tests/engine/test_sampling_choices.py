"""Several choices per prompt (n, best_of): seeds per choice, ranking, shared prompt pages, admission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.parallel_sampling import (
    check_choices_fit,
    choice_params,
    choice_seed,
    cumulative_logprob,
    pages_for_choices,
    rank_best,
)
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ContextLengthExceededError, InvalidParameterError
from kvfence.scope import TenantIdentity

PROMPT = "Once upon a time, in a paged key-value cache far away, there lived"
ORG = TenantIdentity(organization="acme")


# ---- pure parts ------------------------------------------------------------------------------


def test_choice_seeds_are_distinct_stable_and_valid() -> None:
    seeds = [choice_seed(42, i) for i in range(128)]
    assert seeds[0] == 42 and len(set(seeds)) == 128
    assert seeds == [choice_seed(42, i) for i in range(128)]
    assert all(0 <= s < 2**63 for s in seeds[1:])
    assert choice_seed(0, 1) != choice_seed(1, 0)  # unlike seed + index


def test_choice_params_are_single_choices() -> None:
    params = SamplingParams(n=2, best_of=4, seed=5, temperature=0.8, stop=["x"])
    children = [choice_params(params, i) for i in range(4)]
    assert all(c.n == 1 and c.best_of is None and c.num_sequences == 1 for c in children)
    assert [c.seed for c in children] == [choice_seed(5, i) for i in range(4)]
    assert all(c.logprobs == 0 and c.stop == ["x"] and c.temperature == 0.8 for c in children)  # ranked: logprobs on
    assert choice_params(SamplingParams(n=3), 1).logprobs is None and choice_params(SamplingParams(n=3), 1).seed is None


def test_pages_for_choices_counts_shared_prompt_pages_once() -> None:
    # 40-token prompt + 8 = 48 tokens = 3 pages of 16; 2 full prompt pages before the last token are shared
    assert pages_for_choices(40, 8, 1, 16, shares_prefix=True) == 3
    assert pages_for_choices(40, 8, 4, 16, shares_prefix=True) == 3 + 3 * 1
    assert pages_for_choices(40, 8, 4, 16, shares_prefix=False) == 12
    with pytest.raises(ContextLengthExceededError) as info:
        check_choices_fit(40, SamplingParams(max_tokens=8, n=4), 11, 16, shares_prefix=False)
    assert info.value.param == "n" and "12" in str(info.value)
    with pytest.raises(ContextLengthExceededError) as info:
        check_choices_fit(40, SamplingParams(max_tokens=8, n=1, best_of=4), 5, 16, shares_prefix=True)
    assert info.value.param == "best_of"
    check_choices_fit(40, SamplingParams(max_tokens=8, n=4), 6, 16, shares_prefix=True)


def test_rank_and_cumulative_logprob() -> None:
    assert rank_best([-3.0, -1.0, -2.0, -1.0], 3) == [1, 3, 2]
    assert cumulative_logprob([5, 6], [{5: -1.0, 9: -0.5}, {6: -2.0}]) == -3.0
    assert cumulative_logprob([5], None) == float("-inf")


# ---- through the engine ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm(default_model_dir: Path) -> LLM:
    return LLM(model=str(default_model_dir), kv_cache_tokens=4096, max_model_len="auto", device="cpu",
               page_size=16, cache_scope="org")


def test_seeded_choices_are_reproducible_and_distinct(llm: LLM) -> None:
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=11, n=3, ignore_eos=True)
    first = llm.generate(PROMPT, params, tenant=ORG)[0]
    again = llm.generate(PROMPT, params, tenant=ORG)[0]
    texts = [o.token_ids for o in first.outputs]
    assert [o.index for o in first.outputs] == [0, 1, 2]
    assert texts == [o.token_ids for o in again.outputs]
    assert len({tuple(t) for t in texts}) == 3
    single = llm.generate(PROMPT, SamplingParams(max_tokens=10, temperature=1.0, seed=11, ignore_eos=True), tenant=ORG)
    assert single[0].token_ids == texts[0] == first.token_ids  # choice 0 is the n=1 answer
    other = llm.generate(PROMPT, SamplingParams(max_tokens=10, temperature=1.0, seed=12, n=3, ignore_eos=True), tenant=ORG)
    assert [o.token_ids for o in other[0].outputs] != texts


def test_greedy_choices_are_equal(llm: LLM) -> None:
    out = llm.generate(PROMPT, SamplingParams(max_tokens=8, temperature=0, n=2, ignore_eos=True), tenant=ORG)[0]
    assert len(out.outputs) == 2 and out.outputs[0].token_ids == out.outputs[1].token_ids


def test_best_of_keeps_the_highest_cumulative_logprob(llm: LLM) -> None:
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=3, n=2, best_of=5, ignore_eos=True)
    out = llm.generate(PROMPT, params, tenant=ORG)[0]
    assert len(out.outputs) == 2 and all(o.logprobs is None for o in out.outputs)  # not asked for
    # the same five choices, run one by one with their own seeds, scored by their logprobs
    scores = []
    for i in range(5):
        child = choice_params(params, i)
        res = llm.generate(PROMPT, child, tenant=ORG)[0]
        scores.append((cumulative_logprob(res.token_ids, res.logprobs), res.token_ids))
    best = sorted(scores, key=lambda s: -s[0])[:2]
    assert [o.token_ids for o in out.outputs] == [b[1] for b in best]
    assert out.outputs[0].cumulative_logprob == pytest.approx(best[0][0])
    assert out.outputs[0].cumulative_logprob >= out.outputs[1].cumulative_logprob  # type: ignore[operator]


def test_choices_share_the_prompt_pages_within_the_scope(default_model_dir: Path) -> None:
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=2048, max_model_len="auto", device="cpu",
              page_size=16, cache_scope="org")
    engine = llm.engine
    ids = llm.tokenizer.encode(PROMPT)
    assert len(ids) > 33
    scope = llm.scope_key(ORG)
    for i in range(4):
        engine.add_request(f"c{i}", ids, choice_params(SamplingParams(max_tokens=4, n=4, ignore_eos=True), i), scope)
    finals = {}
    peak = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                finals[out.request_id] = out
        peak = max(peak, engine.block_manager.num_used_pages)
    full = (len(ids) - 1) // 16 * 16
    assert finals["c0"].num_cached_tokens == 0
    assert [finals[f"c{i}"].num_cached_tokens for i in (1, 2, 3)] == [full] * 3
    per_choice = -(-(len(ids) + 4) // 16)
    assert peak <= pages_for_choices(len(ids), 4, 4, 16, shares_prefix=True) < 4 * per_choice
    assert engine.pool_is_zero()


def test_other_scopes_and_the_request_scope_never_wait_or_share(default_model_dir: Path) -> None:
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=2048, max_model_len="auto", device="cpu",
              page_size=16, cache_scope="org")
    ids = llm.tokenizer.encode(PROMPT)
    engine = llm.engine
    engine.add_request("a", ids, SamplingParams(max_tokens=2), llm.scope_key(ORG))
    engine.add_request("b", ids, SamplingParams(max_tokens=2), llm.scope_key(TenantIdentity(organization="other")))
    assert engine.stats().num_waiting == 2 and engine.scheduler.num_waiting == 2  # nobody held
    finals = {}
    while engine.has_unfinished_requests():
        finals.update({o.request_id: o for o in engine.step() if o.finished})
    assert finals["b"].num_cached_tokens == 0


def test_aborting_leader_or_held_follower(default_model_dir: Path) -> None:
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=2048, max_model_len="auto", device="cpu",
              page_size=16, cache_scope="org")
    ids = llm.tokenizer.encode(PROMPT)
    engine, scope = llm.engine, llm.scope_key(ORG)
    for rid in ("lead", "f1", "f2"):
        engine.add_request(rid, ids, SamplingParams(max_tokens=3, ignore_eos=True), scope)
    assert engine.scheduler.num_waiting == 1 and engine.stats().num_waiting == 3
    engine.abort_request("f1")  # held: never had pages
    engine.abort_request("lead")  # its follower is queued at once, and computes the prompt itself
    assert engine.scheduler.num_waiting == 1
    finals = {}
    while engine.has_unfinished_requests():
        finals.update({o.request_id: o for o in engine.step() if o.finished})
    assert set(finals) == {"f2"} and len(finals["f2"].token_ids) == 3
    assert engine.pool_is_zero() and engine.block_manager.num_used_pages == 0


def test_choices_that_cannot_fit_together_are_refused_up_front(default_model_dir: Path) -> None:
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=256, max_model_len=128, device="cpu",
              page_size=16, cache_scope="request")
    with pytest.raises(ContextLengthExceededError) as info:
        llm.generate(PROMPT, SamplingParams(max_tokens=60, n=4))
    assert info.value.param == "n"
    assert not llm.engine.has_unfinished_requests() and llm.engine.block_manager.num_used_pages == 0
    assert len(llm.generate(PROMPT, SamplingParams(max_tokens=8, n=2))[0].outputs) == 2


def test_engine_requests_are_single_choices(llm: LLM) -> None:
    with pytest.raises(InvalidParameterError) as info:
        llm.engine.add_request("x", [1, 2, 3], SamplingParams(n=2), llm.scope_key(ORG))
    assert info.value.param == "n"


# ---- SharedPrefill on plain data ---------------------------------------------------------------


def _seq(rid: str, tokens: list[int], scope: bytes = b"s" * 32) -> Any:
    from kvfence.engine.core.sequence import Sequence

    return Sequence(rid, tokens, scope, SamplingParams(max_tokens=2))


def test_shared_prefill_holds_only_same_scope_identical_prompts_longer_than_a_page() -> None:
    from kvfence.engine.kv.shared_prefill import SharedPrefill
    from kvfence.scope import UNSHARED_PREFIX

    sp = SharedPrefill(page_size=4)
    prompt = list(range(9))
    lead = _seq("lead", prompt)
    assert not sp.hold(lead)
    assert sp.hold(_seq("f1", prompt))
    assert not sp.hold(_seq("other-scope", prompt, b"t" * 32))
    assert not sp.hold(_seq("other-prompt", [*prompt[:-1], 99]))
    assert not sp.hold(_seq("short", prompt[:4])) and not sp.hold(_seq("short2", prompt[:4]))  # no full page to share
    unshared = UNSHARED_PREFIX + b"x" * 32
    assert not sp.hold(_seq("u1", prompt, unshared)) and not sp.hold(_seq("u2", prompt, unshared))
    assert sp.hold(_seq("f2", prompt)) and sp.num_held == 2
    assert sp.release() == []  # the leader has computed nothing yet
    lead.num_computed_tokens = 8
    assert sp.release() == []  # one prompt token still to compute
    lead.num_computed_tokens = 9
    assert [s.request_id for s in sp.release()] == ["f1", "f2"] and sp.num_held == 0
    assert not sp.hold(_seq("late", prompt))  # the prompt is done: nothing to wait for


def test_shared_prefill_discard_and_finished_leader() -> None:
    from kvfence.engine.core.sequence import SequenceStatus
    from kvfence.engine.kv.shared_prefill import SharedPrefill

    sp = SharedPrefill(page_size=4)
    prompt = list(range(12))
    lead = _seq("lead", prompt)
    sp.hold(lead)
    for rid in ("a", "b", "c"):
        assert sp.hold(_seq(rid, prompt))
    discarded = sp.discard("b")
    assert discarded is not None and discarded.request_id == "b" and sp.discard("b") is None
    assert sp.discard("unknown") is None
    lead.status = SequenceStatus.FINISHED  # aborted before its prefill: the followers go on their own
    assert [s.request_id for s in sp.release()] == ["a", "c"]


def test_shared_prompt_pages_pass_the_paranoid_isolation_check(default_model_dir: Path) -> None:
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=2048, max_model_len="auto", device="cpu",
              page_size=16, cache_scope="org", verify_isolation=True)
    out = llm.generate(PROMPT, SamplingParams(max_tokens=6, temperature=1.0, seed=2, n=4, ignore_eos=True),
                       tenant=ORG)[0]
    assert [len(o.token_ids) for o in out.outputs] == [6] * 4  # none aborted
    stats = llm.engine.stats()
    assert stats.isolation_incidents == 0
    assert stats.prefix_hit_tokens_by_scope[llm.scope_key(ORG)] == 3 * ((out.num_prompt_tokens - 1) // 16 * 16)
