"""Scheduler: continuous batching, chunked prefill, finishing, abort, admission (I3), preemption."""

from __future__ import annotations

import pytest

from kvfence.engine.core.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from kvfence.engine.core.sequence import FinishReason, Sequence, SequenceStatus
from kvfence.engine.kv.block_manager import BlockManager
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ConfigError, ContextLengthExceededError, InvalidParameterError

SCOPE = b"S" * 32
EOS = 2


def make_seq(rid: str, n: int, max_tokens: int = 4, **kw: object) -> Sequence:
    return Sequence(rid, [10 + i for i in range(n)], SCOPE, SamplingParams(max_tokens=max_tokens, **kw))  # type: ignore[arg-type]


def make_scheduler(num_pages: int = 16, page_size: int = 4, max_model_len: int = 64, **cfg: int) -> Scheduler:
    return Scheduler(
        SchedulerConfig(**cfg),
        BlockManager(num_pages, page_size),
        max_model_len=max_model_len,
        eos_token_ids=[EOS],
    )


def step(sched: Scheduler, token: int = 5) -> tuple[SchedulerOutput, list[Sequence]]:
    out = sched.schedule()
    sampled = {item.seq.request_id: token for item in out.items if item.samples}
    return out, sched.postprocess(out, sampled)


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="max_num_seqs"):
        SchedulerConfig(max_num_seqs=0)
    with pytest.raises(ConfigError, match="max_prefill_chunk"):
        SchedulerConfig(max_prefill_chunk=True)  # type: ignore[arg-type]


def test_sequence_counters() -> None:
    seq = make_seq("r", 3)
    assert seq.num_tokens == 3 and seq.num_completion_tokens == 0 and seq.last_token_id == 12
    seq.append_token(99)
    assert seq.completion_token_ids == [99] and seq.prompt_token_ids == [10, 11, 12]
    assert not seq.is_finished and seq.status is SequenceStatus.WAITING
    with pytest.raises(InvalidParameterError):
        Sequence("empty", [], SCOPE)


def test_prefill_then_decode_until_length() -> None:
    sched = make_scheduler()
    seq = make_seq("r", 6, max_tokens=3)
    sched.add(seq)
    out, done = step(sched)
    assert [(i.start, i.num_new_tokens, i.samples) for i in out.items] == [(0, 6, True)]
    assert seq.status is SequenceStatus.RUNNING and seq.num_computed_tokens == 6
    out, done = step(sched)
    assert [(i.start, i.num_new_tokens) for i in out.items] == [(6, 1)]
    out, done = step(sched)
    assert done == [seq] and seq.finish_reason is FinishReason.LENGTH
    assert seq.num_completion_tokens == 3 and seq.block_table == []
    assert not sched.has_unfinished()
    assert sched.block_manager.num_free_pages == 16


def test_eos_and_stop_token_ids_finish_with_stop_after_min_tokens() -> None:
    sched = make_scheduler()
    a = make_seq("a", 3, max_tokens=8)
    b = make_seq("b", 3, max_tokens=8, stop_token_ids=[7], min_tokens=2)
    c = make_seq("c", 3, max_tokens=2, ignore_eos=True)
    for s in (a, b, c):
        sched.add(s)
    _, done = step(sched, token=EOS)
    assert done == [a] and a.finish_reason is FinishReason.STOP
    _, done = step(sched, token=7)
    # b's first token was EOS (not one of its stop ids); 7 is its 2nd token and min_tokens=2 allows it
    assert done == [b, c]
    assert b.finish_reason is FinishReason.STOP and b.num_completion_tokens == 2
    assert c.finish_reason is FinishReason.LENGTH


def test_stop_token_respects_min_tokens() -> None:
    sched = make_scheduler()
    b = make_seq("b", 3, max_tokens=8, stop_token_ids=[7], min_tokens=3)
    sched.add(b)
    _, done = step(sched, token=7)
    _, done = step(sched, token=7)
    assert done == [] and b.num_completion_tokens == 2
    _, done = step(sched, token=7)
    assert done == [b] and b.finish_reason is FinishReason.STOP


def test_chunked_prefill_respects_chunk_and_budget() -> None:
    sched = make_scheduler(num_pages=32, max_model_len=128, max_prefill_chunk=8, max_num_batched_tokens=12)
    long = make_seq("long", 20, max_tokens=2)
    short = make_seq("short", 3, max_tokens=2)
    sched.add(long)
    sched.add(short)
    out, _ = step(sched)
    assert [(i.seq.request_id, i.start, i.num_new_tokens, i.samples) for i in out.items] == [
        ("long", 0, 8, False),
        ("short", 0, 3, True),
    ]
    out, _ = step(sched)
    assert [(i.seq.request_id, i.start, i.num_new_tokens) for i in out.items] == [
        ("short", 3, 1),  # decodes go first
        ("long", 8, 8),
    ]
    out, _ = step(sched)
    assert [(i.seq.request_id, i.start, i.num_new_tokens, i.samples) for i in out.items] == [
        ("long", 16, 4, True),
    ]
    assert short.is_finished


def test_max_num_seqs_limits_the_batch() -> None:
    sched = make_scheduler(max_num_seqs=2)
    seqs = [make_seq(f"r{i}", 3) for i in range(3)]
    for s in seqs:
        sched.add(s)
    out, _ = step(sched)
    assert len(out.items) == 2 and sched.num_running == 2 and sched.num_waiting == 1


def test_duplicate_request_id_is_rejected() -> None:
    sched = make_scheduler()
    sched.add(make_seq("dup", 3))
    with pytest.raises(InvalidParameterError, match="dup"):
        sched.add(make_seq("dup", 3))


def test_abort_waiting_and_running_releases_pages() -> None:
    sched = make_scheduler(max_num_seqs=1)
    a, b = make_seq("a", 6), make_seq("b", 6)
    sched.add(a)
    sched.add(b)
    step(sched)
    pages = list(a.block_table)
    assert sched.abort("a") is a and a.finish_reason is FinishReason.ABORT and a.is_finished
    assert sched.abort("b") is b and b.finish_reason is FinishReason.ABORT
    assert sched.abort("nope") is None
    assert not sched.has_unfinished()
    # page 0 was full and computed, so it was sealed: it stays cached for same-scope revival;
    # the partly written page 1 is scrubbed (I2)
    assert sched.schedule().scrub_pages == [pages[1]]
    assert sched.block_manager.page_info(pages[0]).state.value == "cached"
    assert sched.block_manager.num_free_pages == 16


def test_abort_between_schedule_and_postprocess_is_skipped() -> None:
    sched = make_scheduler()
    seq = make_seq("r", 3)
    sched.add(seq)
    out = sched.schedule()
    sched.abort("r")
    assert sched.postprocess(out, {"r": 5}) == []
    assert seq.num_completion_tokens == 0


def test_over_length_request_is_rejected_before_allocation() -> None:
    sched = make_scheduler(max_model_len=10)
    with pytest.raises(ContextLengthExceededError, match="10") as info:
        sched.add(make_seq("r", 8, max_tokens=3))
    assert info.value.status_code == 400
    assert sched.num_waiting == 0 and sched.block_manager.num_free_pages == 16
    sched.add(make_seq("ok", 7, max_tokens=3))  # exactly max_model_len is fine


def test_request_larger_than_the_pool_is_rejected() -> None:
    sched = make_scheduler(num_pages=2, page_size=4, max_model_len=64)
    with pytest.raises(ContextLengthExceededError, match="whole pool holds 8"):
        sched.add(make_seq("r", 6, max_tokens=3))
    assert sched.block_manager.num_free_pages == 2 and not sched.has_unfinished()


def test_preemption_by_recompute_returns_pages_and_later_finishes() -> None:
    sched = make_scheduler(num_pages=4, page_size=4, max_model_len=64)
    a, b = make_seq("a", 7, max_tokens=8), make_seq("b", 7, max_tokens=8)
    sched.add(a)
    sched.add(b)
    step(sched)
    assert sched.num_running == 2 and sched.block_manager.num_free_pages == 0
    step(sched)  # both decode within their second page
    out, _ = step(sched)  # a needs a third page: b (the newest) is preempted
    assert out.preempted == [b] and sched.num_preemptions == 1
    assert b.status is SequenceStatus.WAITING and b.block_table == [] and b.num_computed_tokens == 0
    assert [i.seq for i in out.items] == [a]
    b_tokens = list(b.token_ids)
    finished: list[Sequence] = []
    for _ in range(40):
        if not sched.has_unfinished():
            break
        out = sched.schedule()
        for item in out.items:  # never a partial allocation
            assert len(item.seq.block_table) >= sched.block_manager.pages_needed(item.seq.num_tokens)
        finished += sched.postprocess(out, {i.seq.request_id: 5 for i in out.items if i.samples})
    assert finished == [a, b]
    assert b.token_ids[: len(b_tokens)] == b_tokens  # recompute keeps what was generated
    assert a.num_completion_tokens == 8 == b.num_completion_tokens
    assert sched.block_manager.num_free_pages == 4
    sched.block_manager.check_invariants()


def test_abort_after_an_isolation_incident_releases_only_the_ledgers_pages() -> None:
    """Paranoid mode aborts a request whose table was tampered with; the abort must not fail."""
    sched = make_scheduler()
    a, b = make_seq("a", 6), make_seq("b", 6)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    b.block_table[0] = a.block_table[0]
    assert sched.abort("b") is b and b.is_finished
    assert sched.postprocess(out, {"a": 5}) == []
    sched.block_manager.verify(a)
    sched.block_manager.check_invariants()
    assert sched.num_running == 1


def test_decodes_take_turns_when_the_token_budget_is_smaller_than_the_batch() -> None:
    # Admission keeps running <= budget; sequences handed over by a prefill worker (disaggregated
    # mode) join `running` directly and can outnumber the budget.
    sched = make_scheduler(max_num_batched_tokens=2, max_num_seqs=8)
    seqs = [make_seq(f"r{i}", 3, max_tokens=8) for i in range(4)]
    for s in seqs:
        sched.block_manager.allocate(s)
        s.num_computed_tokens = s.num_tokens
        s.append_token(5)
        s.status = SequenceStatus.RUNNING
        sched.running.append(s)
    for _ in range(4):
        out, _ = step(sched)
        assert len(out.items) == 2
    assert [s.num_completion_tokens for s in seqs] == [3, 3, 3, 3]


def test_a_sequence_growing_past_the_rope_switch_is_recomputed_through_the_release_path() -> None:
    """Phi-3's LongRoPE switch at 8 tokens: a 6-token prompt is recomputed from its first token when it
    reaches 9, under a scope narrowed to that length; its pages leave as a preemption's do (sealed
    ones parked under the scope they were computed in, owned ones scrubbed, I2), never remapped."""
    sched = Scheduler(SchedulerConfig(), BlockManager(16, 4), max_model_len=64, eos_token_ids=[EOS],
                      rope_threshold=8, recompute_at_rope_switch=True)
    seq, past = make_seq("r", 6, max_tokens=6), make_seq("p", 10, max_tokens=2)
    sched.add(seq)
    sched.add(past)
    assert (seq.scope_key, past.scope_key) == (SCOPE, SCOPE + b"|rope-length:10")  # a prompt past it: narrowed
    for _ in range(3):  # prefill, then decodes at positions 6 and 7 (the sequence holds 9 tokens after)
        step(sched)
    assert seq.num_tokens == 9 and seq.num_computed_tokens == 8 and seq.rope_length == 6
    short_pages = list(seq.block_table)
    out = sched.schedule()
    assert sched.num_rope_recomputes == 1 and sched.num_preemptions == 0
    assert seq.rope_length == 9 and seq.scope_key == SCOPE + b"|rope-length:9"
    assert [(i.seq.request_id, i.start, i.num_new_tokens) for i in out.items] == [("r", 0, 9)]  # readmitted at once
    assert not set(seq.block_table) & set(short_pages[:2])  # short-rotation pages are no hits under the new key
    assert sorted(sched.block_manager.parked_pages()[SCOPE]) == sorted(short_pages[:2])  # sealed: SCOPE's prefix pages
    sched.postprocess(out, {"r": 5})
    while sched.has_unfinished():
        step(sched)
    assert sched.num_rope_recomputes == 1 and seq.num_completion_tokens == 6


def test_without_the_recompute_rule_a_crossing_sequence_keeps_its_pages() -> None:
    """Llama-family LongRoPE and dynamic NTK: transformers keeps the cached keys, and so does the engine."""
    sched = Scheduler(SchedulerConfig(), BlockManager(16, 4), max_model_len=64, eos_token_ids=[EOS], rope_threshold=8)
    seq = make_seq("r", 8, max_tokens=4)
    sched.add(seq)
    step(sched)
    pages = list(seq.block_table)
    out = sched.schedule()
    assert [(i.start, i.num_new_tokens) for i in out.items] == [(8, 1)] and seq.block_table[: len(pages)] == pages
    assert seq.rope_length == 8 and seq.scope_key == SCOPE
