"""I2 under attack: every way a page leaves a request, then another tenant maps it.

Each test drives the real engine (built-in model, CPU) into a path that releases pages — abort
mid-decode, preemption storms, a failed forward pass, a failed zero-fill — and lets the next tenant
run under :class:`FreshPageWatch`, which fails at the first page handed over with stale bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvfence.engine.config import EngineConfig
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.security.conftest import FreshPageWatch

PAGE = 16
SCOPE_A, SCOPE_B, SCOPE_C = (bytes([i]) * 32 for i in (1, 2, 3))
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


def _engine(model_dir: Path, pages: int, **overrides: Any) -> LLMEngine:
    options: dict[str, Any] = {"model": str(model_dir), "page_size": PAGE, "kv_cache_tokens": pages * PAGE,
                               "max_model_len": "auto", "device": "cpu", "seed": 0, **overrides}
    return LLMEngine(EngineConfig(**options))


def _prompt(seed: int, n: int) -> list[int]:
    return [(seed * 37 + i * 11) % 250 + 5 for i in range(n)]


def _run(engine: LLMEngine, max_steps: int = 500) -> dict[str, list[int]]:
    done: dict[str, list[int]] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return done
        for out in engine.step():
            if out.finished:
                done[out.request_id] = list(out.token_ids)
    raise AssertionError("the engine did not finish")


def _assert_released(engine: LLMEngine) -> None:
    engine.block_manager.check_invariants()
    assert engine.block_manager.num_used_pages == 0
    assert engine.pool_is_zero(), "a free page still holds KV"


def test_the_watch_fails_when_scrubbing_is_off(default_model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The oracle itself: with the unsafe switch, tenant B is handed tenant A's bytes and the watch says so."""
    engine = _engine(default_model_dir, pages=6, scrub=False)
    watch = FreshPageWatch(engine)
    engine.add_request("a", _prompt(1, 70), GREEDY, SCOPE_A)
    _run(engine)
    engine.add_request("b", _prompt(2, 70), GREEDY, SCOPE_B)
    _run(engine)
    assert watch.stale, "without scrubbing the next tenant must see stale pages"
    assert "UNSAFE" in caplog.text


def test_abort_mid_decode_then_another_tenant(default_model_dir: Path) -> None:
    engine = _engine(default_model_dir, pages=6)
    watch = FreshPageWatch(engine)
    engine.add_request("a", _prompt(1, 60), SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True), SCOPE_A)
    for _ in range(6):
        engine.step()
    held = engine.block_manager.held_pages("a")
    assert held
    engine.abort_request("a")
    freed = [p for p in held if p in engine.free_pages()]  # sealed prompt pages stay cached for scope A
    assert freed
    assert engine.pool_is_zero(freed), "aborted pages must be zero at once, not at the next step"
    engine.add_request("b", _prompt(2, 70), GREEDY, SCOPE_B)  # evicts A's cached pages too
    _run(engine)
    watch.assert_clean()
    _assert_released(engine)


def test_preemption_storm_on_a_tiny_pool(default_model_dir: Path) -> None:
    """Three tenants whose answers cannot all fit: many preemptions, and every recompute starts on zeros."""
    params = SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True)
    prompts = {f"t{i}": (_prompt(10 + i, 40), scope) for i, scope in enumerate((SCOPE_A, SCOPE_B, SCOPE_C))}
    alone = {}
    for rid, (prompt, scope) in prompts.items():
        solo = _engine(default_model_dir, pages=12)
        solo.add_request(rid, prompt, params, scope)
        alone.update(_run(solo))
    engine = _engine(default_model_dir, pages=12)  # 192 tokens for three 90-token answers
    watch = FreshPageWatch(engine)
    for rid, (prompt, scope) in prompts.items():
        engine.add_request(rid, prompt, params, scope)
    together = _run(engine)
    assert engine.scheduler.num_preemptions > 0, "the pool was meant to be too small for all three"
    watch.assert_clean()
    assert together == alone  # a preempted answer is recomputed over its own KV only
    _assert_released(engine)


def test_failed_forward_pass_releases_and_zeroes_every_page(default_model_dir: Path) -> None:
    engine = _engine(default_model_dir, pages=12)
    watch = FreshPageWatch(engine)
    calls = {"n": 0}
    real = engine.runner.execute
    broken = {"on": True}

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        # From the 4th pass on the device is gone: every pass fails, retries of the batch's halves
        # included (a fault that one request causes alone is isolated; see test_fault_isolation.py).
        if calls["n"] >= 4 and broken["on"]:
            raise RuntimeError("injected device fault")
        return real(*args, **kwargs)

    engine.runner.execute = failing
    engine.add_request("a", _prompt(1, 50), GREEDY, SCOPE_A)
    engine.add_request("c", _prompt(3, 50), GREEDY, SCOPE_C)
    with pytest.raises(RuntimeError, match="injected"):
        _run(engine)
    broken["on"] = False
    assert not engine.has_unfinished_requests()  # the whole batch was aborted, never answered
    _assert_released(engine)
    engine.add_request("b", _prompt(2, 120), GREEDY, SCOPE_B)
    _run(engine)
    watch.assert_clean()


@pytest.mark.parametrize("failing_call", [1, 2, 3])
def test_failed_zero_fill_is_retried_before_the_pages_are_reused(default_model_dir: Path, failing_call: int) -> None:
    """A zero-fill that raises (a transient device error) must leave its pages owed, not forgotten (I2).

    Scrub calls with pages, in order: the end of the step where A finishes, the abort of B, the
    next batch. Whichever fails, the next tenant still computes over zeros only.
    """
    engine = _engine(default_model_dir, pages=8)
    watch = FreshPageWatch(engine)
    real = engine.runner.scrub
    calls = {"n": 0}

    def flaky(pages: list[int]) -> None:
        if pages:
            calls["n"] += 1
            if calls["n"] == failing_call:
                raise RuntimeError("injected scrub fault")
        real(pages)

    engine.runner.scrub = flaky  # type: ignore[method-assign]
    engine.add_request("a", _prompt(1, 70), GREEDY, SCOPE_A)
    raised = 0
    try:
        _run(engine)
    except RuntimeError:
        raised += 1
    engine.add_request("b", _prompt(4, 40), SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True), SCOPE_B)
    for _ in range(3):
        try:
            engine.step()
        except RuntimeError:
            raised += 1
    try:
        engine.abort_request("b")
    except RuntimeError:
        raised += 1
    engine.add_request("c", _prompt(2, 100), GREEDY, SCOPE_C)
    try:
        _run(engine)
    except RuntimeError:
        raised += 1
        _run(engine)  # the batch that failed is aborted; the engine goes on
    assert raised == 1, "the injected fault must surface as an error, exactly once"
    watch.assert_clean()
    engine.step()  # idle step: whatever is still owed is zeroed now
    _assert_released(engine)


def test_a_prompt_that_fits_the_context_but_not_the_free_pool_waits_without_pages(default_model_dir: Path) -> None:
    """I3: no partial allocation. B is admissible (fits the pool) but must wait, holding nothing."""
    engine = _engine(default_model_dir, pages=8, max_prefill_chunk=32)
    watch = FreshPageWatch(engine)
    engine.add_request("a", _prompt(1, 60), SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True), SCOPE_A)
    engine.step()
    engine.add_request("b", _prompt(2, 100), SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), SCOPE_B)
    seen_waiting = False
    while engine.scheduler.get("a") is not None:
        engine.step()
        b = engine.scheduler.get("b")
        if b is not None and not b.block_table:
            seen_waiting = True
            assert engine.block_manager.held_pages("b") == []
    assert seen_waiting
    _run(engine)
    watch.assert_clean()
    _assert_released(engine)


# ---- I6: the shared eviction order was a channel; the partitioned prefix cache closes it ----------


def _probe_after_victim(model_dir: Path, victim_len: int, **overrides: Any) -> tuple[int, int]:
    """Prime+probe: B caches two prompts, victim A (another scope) runs, B resends both and reads its hits.

    A 16-page pool serving at most 128 tokens: the default prefix-cache budget is the other 8
    pages. Under one shared LRU, B's 12 cached pages leave 4 free, and the victim's pages (1 to 8)
    push out B's oldest ones in proportion to its length.
    """
    engine = _engine(model_dir, pages=16, max_model_len=128, **overrides)
    one = SamplingParams(max_tokens=1, temperature=0.0)
    primes = [_prompt(7, 100), _prompt(9, 100)]
    for k, prompt in enumerate(primes):
        engine.add_request(f"prime{k}", prompt, one, SCOPE_B)
        _run(engine)
    engine.add_request("victim", _prompt(8, victim_len), one, SCOPE_A)
    _run(engine)
    hits = []
    for k in (1, 0):  # newest first: the oldest is what a victim evicts first under the shared LRU
        engine.add_request(f"probe{k}", primes[k], one, SCOPE_B)
        while engine.has_unfinished_requests():
            hits += [out.num_cached_tokens for out in engine.step() if out.finished]
    engine.block_manager.check_invariants()
    return hits[0], hits[1]


VICTIM_LENGTHS = (1, 40, 100, 112, 127)


def test_another_scopes_prompt_length_does_not_show_in_my_hits(default_model_dir: Path) -> None:
    hits = [_probe_after_victim(default_model_dir, n) for n in VICTIM_LENGTHS]
    # B keeps its share of the budget whatever A sent: 4 of the 8 pages, its newest prompt's head
    assert hits == [(4 * PAGE, 0)] * len(VICTIM_LENGTHS)


def test_the_attack_is_real_under_the_unsafe_shared_lru(default_model_dir: Path) -> None:
    """The same probe reads the victim's length when every scope shares one LRU (the old design)."""
    oldest = [_probe_after_victim(default_model_dir, n, unsafe_shared_prefix_cache=True)[1] for n in VICTIM_LENGTHS]
    assert oldest[0] == oldest[1] == 6 * PAGE  # short victims fit in the free pages
    assert oldest[1] > oldest[2] > oldest[4]  # longer ones evict B's oldest pages, page by page
