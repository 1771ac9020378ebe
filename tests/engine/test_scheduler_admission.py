"""Admission (I3) and a full pool: reject before allocating, wait rather than run on part of a pool."""

from __future__ import annotations

import pytest

from kvfence.engine.core.scheduler import Scheduler, SchedulerConfig
from kvfence.engine.core.sequence import FinishReason, Sequence, SequenceStatus
from kvfence.engine.kv.block_manager import BlockManager
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ContextLengthExceededError

SCOPE = b"T" * 32
PS = 4


def make_seq(rid: str, n: int, max_tokens: int, scope: bytes = SCOPE) -> Sequence:
    return Sequence(
        rid, [1 + (i % 5) for i in range(n)], scope, SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    )


def make(num_pages: int, max_model_len: int, **cfg: int) -> Scheduler:
    return Scheduler(SchedulerConfig(**cfg), BlockManager(num_pages, PS), max_model_len=max_model_len)


def run_step(sched: Scheduler) -> list[Sequence]:
    out = sched.schedule()
    for item in out.items:
        assert len(item.seq.block_table) >= sched.block_manager.pages_needed(item.seq.num_tokens)
    return sched.postprocess(out, {i.seq.request_id: 3 for i in out.items if i.samples})


def test_over_length_rejected_before_allocation_with_both_numbers() -> None:
    sched = make(num_pages=16, max_model_len=32)
    sched.add(make_seq("running", 5, 2))
    run_step(sched)
    free = sched.block_manager.num_free_pages
    with pytest.raises(ContextLengthExceededError) as info:
        sched.add(make_seq("long", 30, 3))
    msg = str(info.value)
    assert "32" in msg and "33" in msg and "max_tokens" in msg
    assert info.value.param == "max_tokens" and info.value.code == "context_length_exceeded"
    assert sched.block_manager.num_free_pages == free
    assert sched.get("long") is None and sched.num_waiting == 0 and sched.num_running == 1
    sched.add(make_seq("long", 29, 3))  # the id is free again; exactly max_model_len fits


def test_request_larger_than_the_whole_pool_is_rejected() -> None:
    # max_model_len larger than the pool (the engine refuses that at start-up; the scheduler too)
    sched = make(num_pages=4, max_model_len=1000)
    with pytest.raises(ContextLengthExceededError, match="whole pool holds 16"):
        sched.add(make_seq("huge", 12, 5))
    assert sched.block_manager.num_free_pages == 4 and not sched.has_unfinished()
    sched.add(make_seq("fits", 12, 4))


def test_full_pool_makes_requests_wait_without_partial_allocation() -> None:
    sched = make(num_pages=4, max_model_len=16)
    hog = make_seq("hog", 11, 4)  # 3 pages now, a 4th when it decodes past 12 tokens
    sched.add(hog)
    out = sched.schedule()
    assert [i.seq for i in out.items] == [hog] and len(hog.block_table) == 3
    waiter = make_seq("waiter", 6, 2, scope=b"W" * 32)  # needs 2 pages; at most 1 is free
    sched.add(waiter)
    sched.postprocess(out, {"hog": 3})
    for _ in range(3):
        out = sched.schedule()
        assert waiter.block_table == [] and waiter.status is SequenceStatus.WAITING
        assert [i.seq for i in out.items] == [hog]
        sched.postprocess(out, {"hog": 3})
    assert hog.finish_reason is FinishReason.LENGTH
    out = sched.schedule()
    assert [i.seq for i in out.items] == [waiter] and len(waiter.block_table) == 2


def test_head_of_line_request_is_not_starved_by_smaller_ones() -> None:
    sched = make(num_pages=4, max_model_len=16)
    hog = make_seq("hog", 9, 4, scope=b"H" * 32)  # 3 pages
    sched.add(hog)
    run_step(sched)
    big = make_seq("big", 8, 4, scope=b"B" * 32)  # 2 pages: must wait for hog
    small = make_seq("small", 2, 1, scope=b"S" * 32)  # would fit, but arrived after big
    sched.add(big)
    sched.add(small)
    run_step(sched)
    assert big.status is SequenceStatus.WAITING and small.status is SequenceStatus.WAITING
    while not hog.is_finished:
        run_step(sched)
    out = sched.schedule()
    assert [i.seq.request_id for i in out.items] == ["big", "small"]


def test_preemption_by_recompute_scrubs_pages_and_finishes_later() -> None:
    sched = make(num_pages=4, max_model_len=16)
    old, new = make_seq("old", 5, 8), make_seq("new", 5, 8, scope=b"U" * 32)
    sched.add(old)
    sched.add(new)
    run_step(sched)
    assert sched.block_manager.num_free_pages == 0
    for _ in range(3):  # decode to 9 tokens each: both still within their two pages
        run_step(sched)
    new_pages = list(new.block_table)
    out = sched.schedule()  # old computes position 8: it needs a third page
    assert out.preempted == [new] and new.block_table == [] and new.num_computed_tokens == 0
    # new's page 0 was sealed (KV computed): cached in its scope; its written tail page is scrubbed
    assert new_pages[1] in out.scrub_pages
    assert new_pages[1] in old.block_table  # ... and it is old's new page in this very batch
    sched.postprocess(out, {"old": 3})
    generated_before = list(new.completion_token_ids)
    done: list[Sequence] = []
    readmitted_start: int | None = None
    for _ in range(50):
        if not sched.has_unfinished():
            break
        out = sched.schedule()
        for item in out.items:
            if item.seq is new and readmitted_start is None:
                readmitted_start = item.start
        done += sched.postprocess(out, {i.seq.request_id: 3 for i in out.items if i.samples})
    assert done == [old, new]
    assert new.completion_token_ids[: len(generated_before)] == generated_before
    assert new.num_completion_tokens == 8 and new.finish_reason is FinishReason.LENGTH
    # The pool holds exactly one max_model_len request, so it is a tight pool (I6): half of it may
    # cache, and a request that may grow past the other half (old: 13 tokens, 4 pages) flushes every
    # scope's cache and keeps anything from parking while it runs. new's sealed first page is
    # therefore not revived: the recompute starts from scratch, whatever old's length was.
    assert readmitted_start == new.num_cached_tokens == 0
    assert sched.num_preemptions >= 1
    assert sched.block_manager.num_free_pages == 4
    sched.block_manager.check_invariants()


def test_same_step_admissions_never_read_each_others_unwritten_pages() -> None:
    """The race: two same-scope requests with one prefix admitted together share nothing."""
    sched = make(num_pages=16, max_model_len=32, max_prefill_chunk=4)
    a, b = make_seq("a", 13, 2), make_seq("b", 13, 2)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert {i.seq.request_id for i in out.items} == {"a", "b"}
    assert a.num_cached_tokens == 0 == b.num_cached_tokens
    assert not set(a.block_table) & set(b.block_table)
    sched.postprocess(out, {})
    # after a's first chunk (4 tokens) is written, a newcomer may share exactly that page
    c = make_seq("c", 13, 2)
    sched.add(c)
    out = sched.schedule()
    assert c.num_cached_tokens == 4
    assert c.block_table[0] in (a.block_table[0], b.block_table[0])
    for item in out.items:
        sched.block_manager.verify(item.seq)
