"""Stateful test of I1/I2/I3: three tenants with shared-prefix prompts on a tiny KV pool.

Hypothesis drives the real Scheduler + BlockManager through add / step / abort / stop-string
finish. Every step simulates the forward pass on a plain Python "KV pool": each page slot records
which request wrote which token at which position, and the scheduler's scrub list clears pages
before the forward pass, exactly as the model runner must. After every rule the machine checks,
against this simulated pool and not only against the ledger:

* I1: every slot a sequence can read holds its own token at its own position, written by itself
  or by a same-scope request into a page that the ledger calls a sealed prefix page;
* I2: no mapped page holds a byte written by a request of another scope (or by another request
  of the same scope, unless the page is a sealed prefix page), at any time it can be read;
* writes only ever go to pages the writer owns (never into a shared sealed page);
* no partial allocation: a scheduled sequence has pages for all of its tokens;
* ledger: ref counts equal the number of block tables holding each page, free + used == pool,
  generation counters never decrease and advance whenever a page's content changes hands;
* I6: parked prefix pages stay within the budget C, each scope within its share (at least Q), at
  most C // Q scopes hold cache; and in every step, a scope none of whose requests ran loses
  parked pages only when another scope joins the cache (down to the new share, or whole when it
  is the least recently admitted one): never because another scope needed pages. A parked page
  never reaches another scope's request in a step in which no scope joined. (In a tight pool a
  request past the fixed flush line empties every scope's cache: such steps are counted apart.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvfence.engine.core.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from kvfence.engine.core.sequence import FinishReason, Sequence, SequenceStatus
from kvfence.engine.kv.block_manager import BlockManager, PageState
from kvfence.engine.kv.cache_partition import ScopedPrefixCache
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ContextLengthExceededError

SCOPES = [bytes([65 + i]) * 32 for i in range(3)]  # three tenants
EOS = 0
VOCAB = 3  # tiny, so equal pages (and so prefix-cache candidates) are frequent
BASES = [[1, 2, 3, 1] * 16, [2, 2, 1, 3, 3, 1, 1, 2] * 8]  # shared prefixes, across and within scopes

COVERAGE: Counter[str] = Counter()


@dataclass(frozen=True)
class Written:
    """What one KV slot of the simulated pool holds."""

    writer: str
    scope: bytes
    token: int
    pos: int


class EngineIsolationMachine(RuleBasedStateMachine):
    scrub = True

    def __init__(self) -> None:
        super().__init__()
        self.ready = False

    @initialize(
        num_pages=st.integers(4, 12),
        page_size=st.sampled_from([2, 1, 3, 4]),
        chunk=st.integers(1, 8),
        budget=st.integers(2, 16),
        max_seqs=st.integers(1, 4),
        data=st.data(),
    )
    def setup(self, num_pages: int, page_size: int, chunk: int, budget: int, max_seqs: int, data: st.DataObject) -> None:
        max_pages = data.draw(st.integers(max(1, num_pages // 3), num_pages), label="max_model_len in pages")
        room = num_pages - max_pages
        cache_pages = data.draw(st.one_of(st.none(), st.integers(0, room)), label="cache pages (None: default)")
        # (an explicit Q is at most the explicit budget; a default budget may be half the pool)
        most = max(1, cache_pages) if cache_pages is not None else max(1, room, num_pages // 2)
        # half the budget: two scopes hold cache room, so the third pushes one out whole
        scope_pages = data.draw(st.one_of(st.none(), st.integers(1, most), st.just(max(1, most // 2))), label="Q")
        self.bm = BlockManager(num_pages, page_size, scrub=self.scrub, cache_pages=cache_pages, scope_pages=scope_pages)
        self.max_model_len = max_pages * page_size
        self.sched = Scheduler(
            SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=budget, max_prefill_chunk=chunk),
            self.bm,
            max_model_len=self.max_model_len,
            eos_token_ids=[EOS],
        )
        self.pool: list[dict[int, Written]] = [{} for _ in range(num_pages)]
        self.live: dict[str, Sequence] = {}
        self.num_added = 0
        self.ledger_seen = [self._content(p) for p in range(num_pages)]
        self.ready = True
        self.tamper()

    def tamper(self) -> None:
        """A hook for the machines that prove the checks can fail."""

    def teardown(self) -> None:
        if self.ready:
            COVERAGE["preemptions"] += self.sched.num_preemptions
            COVERAGE["hit_tokens"] += sum(self.bm.prefix_hit_tokens_by_scope.values())
            COVERAGE["scopes_with_hits"] = max(
                COVERAGE["scopes_with_hits"], len(self.bm.prefix_hit_tokens_by_scope)
            )

    # ---- rules -------------------------------------------------------------------------------

    @precondition(lambda self: self.ready)
    @rule(
        scope=st.integers(0, 2),
        base=st.integers(0, 1),
        ignore_eos=st.booleans(),
        data=st.data(),
    )
    def add(self, scope: int, base: int, ignore_eos: bool, data: st.DataObject) -> None:
        total = data.draw(st.integers(2, self.max_model_len + 2), label="prompt + max_tokens")
        max_tokens = data.draw(st.integers(1, min(8, total - 1)), label="max_tokens")
        prompt_len = total - max_tokens
        prefix_len = data.draw(st.integers(0, prompt_len), label="shared prefix length")
        suffix = data.draw(
            st.lists(
                st.integers(1, VOCAB), min_size=prompt_len - prefix_len, max_size=prompt_len - prefix_len
            ),
            label="suffix",
        )
        prompt = BASES[base][:prefix_len] + suffix
        rid = f"r{self.num_added}"
        self.num_added += 1
        seq = Sequence(
            rid, prompt, SCOPES[scope], SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)
        )
        free_before = self.bm.num_free_pages
        if total > self.max_model_len:  # I3: refused before any allocation
            with pytest.raises(ContextLengthExceededError):
                self.sched.add(seq)
            assert self.bm.num_free_pages == free_before and seq.block_table == []
            assert self.sched.get(rid) is None
            COVERAGE["rejected"] += 1
            return
        self.sched.add(seq)
        self.live[rid] = seq

    @precondition(lambda self: self.ready)
    @rule(scopes=st.lists(st.integers(0, 2), min_size=2, max_size=4), base=st.integers(0, 1))
    def crowd(self, scopes: list[int], base: int) -> None:
        """Requests that fit one by one but not together once they decode: forces preemption."""
        max_tokens = min(8, self.max_model_len // 2)
        prompt_len = max(1, min(self.max_model_len - max_tokens, self.max_model_len // len(scopes)))
        for scope in scopes:
            rid = f"r{self.num_added}"
            self.num_added += 1
            params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            seq = Sequence(rid, BASES[base][:prompt_len], SCOPES[scope], params)
            self.sched.add(seq)
            self.live[rid] = seq

    @precondition(lambda self: self.ready)
    @rule(tokens=st.lists(st.sampled_from([1, 2, 3, EOS]), min_size=1, max_size=6), repeat=st.integers(1, 4))
    def steps(self, tokens: list[int], repeat: int) -> None:
        for i in range(repeat):
            self.step(tokens[i:] + tokens[:i])
            if i + 1 < repeat:
                self.isolation_holds()

    def step(self, tokens: list[int]) -> None:
        was_waiting = {s.request_id for s in self.sched.waiting}
        parked_before = self.bm.parked_pages()
        generations_before = {p: self.bm.page_info(p).generation for pages in parked_before.values() for p in pages}
        flushes_before = self.bm.num_cache_flushes
        policy = self.bm._parked
        assert isinstance(policy, ScopedPrefixCache)
        joins_before = policy.num_joins
        out = self.sched.schedule()
        for page_id in self.bm.take_scrub_list():  # the runner zero-fills inside the forward pass, first (I2)
            self.pool[page_id].clear()
        for seq in self.sched.running:  # what the forward pass may read
            self._check_pages(seq)
        for item in out.items:
            seq = item.seq
            assert len(seq.block_table) >= self.bm.pages_needed(seq.num_tokens), "partial allocation"
            if seq.request_id in was_waiting:
                self._note_admission(seq)
            for pos in range(item.start):  # attention reads the whole prefix through the block table
                self._check_readable(seq, pos)
            for pos in range(item.start, item.start + item.num_new_tokens):
                self._write(seq, pos)
        sampling = [item.seq.request_id for item in out.items if item.samples]
        sampled = {rid: tokens[i % len(tokens)] for i, rid in enumerate(sampling)}
        for seq in self.sched.postprocess(out, sampled):
            assert seq.is_finished and seq.block_table == [] and seq.finish_reason is not None
            del self.live[seq.request_id]
        for seq in out.preempted:
            assert seq.status is SequenceStatus.WAITING and seq.block_table == []
        ran = {item.seq.scope_key for item in out.items} | {seq.scope_key for seq in out.preempted}
        if self.bm.num_cache_flushes == flushes_before:
            self._check_partition_step(parked_before, out, joined=policy.num_joins > joins_before)
        else:  # a tight pool admitted a request past the flush line: every scope's cache went
            # (what is parked now was released in this step, e.g. by the long request as it ended)
            # (or a page the long request revived as its own hit and released again)
            for scope, pages in self.bm.parked_pages().items():
                for p in pages:
                    survived = generations_before.get(p) == self.bm.page_info(p).generation
                    assert not survived or scope in ran, "a parked page survived a flush"
            COVERAGE["flushes"] += 1

    def _check_partition_step(self, before: dict[bytes, list[int]], out: SchedulerOutput, *, joined: bool) -> None:
        """I6: nothing another scope asked for in this step moved a scope's parked pages."""
        after = self.bm.parked_pages()
        ran = {item.seq.scope_key for item in out.items}
        preempted = {seq.scope_key for seq in out.preempted}
        policy = self.bm._parked
        assert isinstance(policy, ScopedPrefixCache)
        holders_by_page = {p: seq.scope_key for seq in self.live.values() for p in seq.block_table}
        for scope, pages in before.items():
            if scope not in after:  # pushed out whole: only by a newcomer, when the holders were full
                assert joined, "a scope left the cache without a newcomer"
                COVERAGE["scopes_pushed_out"] += 1
                continue
            COVERAGE["shares_shrunk"] += joined and len(after[scope]) < len(pages)
            if scope not in ran | preempted:
                if joined:  # shares shrink: its own oldest pages go, down to the new share
                    kept = min(len(pages), policy.share)
                    assert after[scope] == pages[len(pages) - kept :], "cross-scope eviction beyond the share"
                else:
                    assert after[scope] == pages, "a scope that did not run lost parked pages"
            if not joined and scope not in preempted:
                for page_id in pages:
                    taker = holders_by_page.get(page_id)
                    assert taker in (None, scope), f"page {page_id} parked by one scope went to another's request"

    @precondition(lambda self: self.ready and bool(self.live))
    @rule(tokens=st.lists(st.sampled_from([1, 2, 3, EOS]), min_size=1, max_size=6))
    def drain(self, tokens: list[int]) -> None:
        """Liveness: every admitted request finishes, preempted ones included, with a full pool."""
        for i in range(2000):
            if not self.sched.has_unfinished():
                break
            self.step(tokens[i % len(tokens) :] + tokens[: i % len(tokens)])
            self.isolation_holds()
        assert not self.live and not self.sched.has_unfinished(), f"stuck: {self.live}"
        assert self.bm.num_used_pages == 0

    @precondition(lambda self: self.ready and bool(self.live))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.live)))
        seq = self.sched.abort(rid)
        assert seq is self.live.pop(rid)
        assert seq.block_table == [] and seq.finish_reason is FinishReason.ABORT

    @precondition(lambda self: self.ready and bool(self.sched.running))
    @rule(data=st.data())
    def stop_string(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(self.sched.running))
        self.sched.finish(seq, FinishReason.STOP)
        del self.live[seq.request_id]
        assert seq.block_table == []

    # ---- checks ------------------------------------------------------------------------------

    @invariant()
    def isolation_holds(self) -> None:
        if not self.ready:
            return
        self.bm.check_invariants()
        refs: Counter[int] = Counter()
        for seq in self.live.values():
            refs.update(seq.block_table)
            if seq.block_table:
                self.bm.verify(seq)
                self._check_pages(seq)
            else:
                assert seq.status is SequenceStatus.WAITING
        for page_id in range(self.bm.num_pages):
            assert self.bm.page_info(page_id).ref_count == refs[page_id]
        assert self.bm.num_free_pages + self.bm.num_used_pages == self.bm.num_pages
        parked = self.bm.parked_pages()
        policy = self.bm._parked
        assert isinstance(policy, ScopedPrefixCache)
        assert self.bm.num_parked_pages == sum(map(len, parked.values())) <= self.bm.cache_pages
        assert len(parked) <= policy.max_scopes and (policy.share >= policy.scope_pages or not policy.cache_pages)
        assert all(len(pages) <= policy.share for pages in parked.values())
        reserved = self.bm.flush_above_pages or self.bm.pages_needed(self.max_model_len)
        assert self.bm.cache_pages + reserved <= self.bm.num_pages
        assert self.bm.num_used_pages == len(refs)
        self._check_generations()

    def _content(self, page_id: int) -> tuple[int, PageState, object]:
        info = self.bm.page_info(page_id)
        holder = info.owner if info.state is PageState.OWNED else info.content_hash
        return info.generation, info.state, holder

    def _check_generations(self) -> None:
        for page_id in range(self.bm.num_pages):
            old_gen, old_state, old_holder = self.ledger_seen[page_id]
            gen, state, holder = now = self._content(page_id)
            assert gen >= old_gen, f"page {page_id}: generation went back"
            # without a new generation a page may only be taken from the free list (its content
            # was retired, with a bump, when it was freed) or be sealed by its writer
            same_content = (old_state, state) in {
                (PageState.FREE, PageState.OWNED),
                (PageState.OWNED, PageState.CACHED),
                (PageState.FREE, PageState.CACHED),  # both within one step
            }
            if gen == old_gen and holder != old_holder and not same_content:
                raise AssertionError(f"page {page_id} changed hands without a new generation")
            self.ledger_seen[page_id] = now

    def _check_pages(self, seq: Sequence) -> None:
        """I1 + I2 on the simulated pool: nothing foreign in any page ``seq`` maps."""
        ps = self.bm.page_size
        for index, page_id in enumerate(seq.block_table):
            info = self.bm.page_info(page_id)
            for slot, w in self.pool[page_id].items():
                own = w.writer == seq.request_id
                shared = info.state is PageState.CACHED and info.scope_key == seq.scope_key == w.scope
                assert own or shared, f"page {page_id} of {seq.request_id} holds bytes of {w.writer}"
                pos = index * ps + slot
                if pos < seq.num_computed_tokens:
                    assert (w.pos, w.token) == (pos, seq.token_ids[pos])
            for pos in range(index * ps, min((index + 1) * ps, seq.num_computed_tokens)):
                self._check_readable(seq, pos)

    def _check_readable(self, seq: Sequence, pos: int) -> None:
        page_id = seq.block_table[pos // self.bm.page_size]
        w = self.pool[page_id].get(pos % self.bm.page_size)
        assert w is not None, f"{seq.request_id} reads unwritten KV at {pos} (page {page_id})"
        assert (w.pos, w.token) == (pos, seq.token_ids[pos])
        if w.writer != seq.request_id:
            info = self.bm.page_info(page_id)
            assert info.state is PageState.CACHED and info.scope_key == seq.scope_key == w.scope

    def _write(self, seq: Sequence, pos: int) -> None:
        page_id = seq.block_table[pos // self.bm.page_size]
        info = self.bm.page_info(page_id)
        assert info.state is PageState.OWNED and info.owner == seq.request_id, "write into a shared page"
        self.pool[page_id][pos % self.bm.page_size] = Written(
            seq.request_id, seq.scope_key, seq.token_ids[pos], pos
        )

    def _note_admission(self, seq: Sequence) -> None:
        if seq.num_cached_tokens:
            COVERAGE["admissions_with_hits"] += 1
        first = tuple(seq.token_ids[: self.bm.page_size])
        for page_id in range(self.bm.num_pages):
            info = self.bm.page_info(page_id)
            if info.state is PageState.CACHED and info.tokens == first and info.scope_key != seq.scope_key:
                COVERAGE["cross_scope_candidates"] += 1  # the other tenant's equal page was there
                assert page_id not in seq.block_table
                break


def test_isolation_state_machine() -> None:
    COVERAGE.clear()
    run_state_machine_as_test(
        EngineIsolationMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    # the run really exercised what it claims to check
    assert COVERAGE["preemptions"] > 0
    assert COVERAGE["admissions_with_hits"] > 0 and COVERAGE["scopes_with_hits"] >= 2
    assert COVERAGE["cross_scope_candidates"] > 0
    assert COVERAGE["rejected"] > 0
    assert COVERAGE["shares_shrunk"] > 0 and COVERAGE["scopes_pushed_out"] > 0 and COVERAGE["flushes"] > 0, COVERAGE


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_isolation_state_machine_long() -> None:
    run_state_machine_as_test(
        EngineIsolationMachine,
        settings=settings(
            max_examples=400, stateful_step_count=60, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )


class UnscrubbedMachine(EngineIsolationMachine):
    scrub = False


def test_the_checker_catches_stale_bytes_when_scrubbing_is_off() -> None:
    """Proof that the pool checks can fail: with the unsafe switch, I2 breaks and is caught."""
    with pytest.raises(AssertionError, match="holds bytes of"):
        run_state_machine_as_test(
            UnscrubbedMachine,
            settings=settings(
                max_examples=200,
                stateful_step_count=40,
                deadline=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
                phases=[Phase.generate],  # shrinking the found counterexample costs time, proves nothing
            ),
        )


class SharedEvictionMachine(EngineIsolationMachine):
    """The old single LRU behind the partition's back: allocation may take any scope's parked page."""

    def tamper(self) -> None:
        policy = self.bm._parked
        assert isinstance(policy, ScopedPrefixCache)
        holders = policy._holders

        def any_scopes_page(scope_key: bytes) -> int | None:
            for pages in holders.values():
                if pages:
                    page_id, _ = pages.popitem(last=False)
                    policy._num_parked -= 1
                    return page_id
            return None

        policy.parked_of = lambda scope_key: policy.num_parked  # type: ignore[method-assign]
        policy.take_for = any_scopes_page  # type: ignore[method-assign]


def test_the_checker_catches_cross_scope_eviction() -> None:
    """Proof that the I6 step checks can fail: a shared eviction order is caught."""
    with pytest.raises(AssertionError, match=r"lost parked pages|went to another.s request"):
        run_state_machine_as_test(
            SharedEvictionMachine,
            settings=settings(
                max_examples=200, stateful_step_count=40, deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck), report_multiple_bugs=False, phases=[Phase.generate],
            ),
        )
