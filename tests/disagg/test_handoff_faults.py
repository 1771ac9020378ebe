"""I4 end to end: a real prefill worker process, real ZeroMQ on 127.0.0.1, a man in the middle.

Every fault ends the same way: the request finishes with an error and no token, and every decode
page the failed handoff touched is zero afterwards. Never an answer.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.disagg.protocol import Manifest
from kvfence.disagg.wire import Message, MessageKind, encode
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.core.outputs import RequestOutput
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import CapacityError, ConfigError, ContextLengthExceededError
from tests.disagg.conftest import WORKER_MAX_MODEL_LEN, WorkerHandle, start_worker
from tests.disagg.helpers import (
    AllocationSpy,
    HandoffBuffer,
    assert_error_not_answer,
    decode_config,
    drive,
    make_engine,
    resign_handoff,
)
from tests.disagg.mitm import Mitm

GREEDY = SamplingParams(max_tokens=8, temperature=0.0)
SCOPE_A = b"scope-tenant-a"
SCOPE_B = b"scope-tenant-b"
PROMPT = list(range(40, 80))  # 40 tokens: 3 pages of 16


@pytest.fixture
def engine(model_dir: Path, mitm: Mitm) -> Iterator[DisaggregatedEngine]:
    eng = make_engine(model_dir, mitm.address, timeout_s=3.0)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> LLMEngine:
    """The colocated engine with the decode side's configuration."""
    return LLMEngine(decode_config(model_dir))


def _reference_tokens(reference: LLMEngine, prompt: list[int], params: SamplingParams = GREEDY) -> list[int]:
    rid = f"ref-{time.monotonic_ns()}"
    reference.add_request(rid, prompt, params, SCOPE_A)
    return drive(reference, [rid])[rid][-1].token_ids


def _only(engine: DisaggregatedEngine, rid: str, prompt: list[int], scope: bytes = SCOPE_A,
          params: SamplingParams = GREEDY) -> list[RequestOutput]:
    engine.add_request(rid, prompt, params, scope)
    return drive(engine, [rid], timeout_s=30)[rid]


def _assert_scrubbed(engine: DisaggregatedEngine, spy: AllocationSpy, rid: str, *, allocated: bool) -> None:
    pages = spy.pages_of(rid)
    assert bool(pages) == allocated, pages
    assert engine.pool_is_zero(pages)  # the pages the failed handoff touched (I2)
    assert engine.pool_is_zero()  # and every free page
    engine.block_manager.check_invariants()
    assert engine.stats().num_used_pages == 0


def _when(kind: MessageKind, action: object) -> object:
    def hook(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        return action(msg, frames) if msg.kind is kind else [frames]  # type: ignore[operator]

    return hook


# ---- the clean path --------------------------------------------------------------------------


def test_clean_handoff_over_tcp_equals_colocated(engine: DisaggregatedEngine, mitm: Mitm, reference: LLMEngine) -> None:
    outs = _only(engine, "clean", PROMPT)
    assert outs[-1].finish_reason == "length"
    assert outs[-1].token_ids == _reference_tokens(reference, PROMPT)
    kinds = mitm.kinds_to_decode()
    assert kinds.count("MANIFEST") == 1 and kinds.count("PAGE") == 3 and kinds.count("COMMIT") == 1
    assert engine.stats().num_handoffs_verified == 1
    assert engine.pool_is_zero()


# ---- I3 before anything is allocated ---------------------------------------------------------


def test_over_length_is_rejected_before_anything_is_allocated(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)
    with pytest.raises(ContextLengthExceededError):
        engine.add_request("long", list(range(250)), SamplingParams(max_tokens=20), SCOPE_A)
    for _ in range(5):
        engine.step()
    assert spy.tables == {}
    assert "SUBMIT" not in mitm.kinds_to_prefill()  # it never left this process
    assert not engine.has_unfinished_requests()


def test_connect_refuses_a_prefill_pool_smaller_than_the_advertised_context(model_dir: Path, shared_worker: WorkerHandle) -> None:
    with pytest.raises(CapacityError, match="prefill worker"):
        make_engine(model_dir, shared_worker.address, kv_cache_tokens=1024, max_model_len=1024)
    eng = make_engine(model_dir, shared_worker.address, kv_cache_tokens=1024, max_model_len="auto")
    try:
        assert eng.capacity.max_model_len == WORKER_MAX_MODEL_LEN
    finally:
        eng.close()


def test_connect_refuses_another_handoff_key(model_dir: Path, shared_worker: WorkerHandle) -> None:
    with pytest.raises(ConfigError, match="handoff key"):
        make_engine(model_dir, shared_worker.address, key=b"not the key")


# ---- faults in transit -----------------------------------------------------------------------


def test_corrupted_page_byte_aborts_and_scrubs(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)

    def flip(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.fields.get("index") != 1:
            return [frames]
        payload = bytearray(frames[1])
        payload[len(payload) // 3] ^= 0x10
        return [[frames[0], bytes(payload)]]

    mitm.to_decode = _when(MessageKind.PAGE, flip)  # type: ignore[assignment]
    out = assert_error_not_answer(_only(engine, "flip", PROMPT), "checksum")
    assert "page 1" in (out.error or "")
    _assert_scrubbed(engine, spy, "flip", allocated=True)
    time.sleep(0.1)
    assert "ABORT" in mitm.kinds_to_prefill()  # the prefill side is told, explicitly


def test_wrong_page_count_aborts_before_allocation(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)
    mitm.to_decode = HandoffBuffer("count", lambda m, p: resign_handoff(m, p[:-1], page_ids=[
        (e.page_id, e.generation) for e in m.pages[:-1]]))
    assert_error_not_answer(_only(engine, "count", PROMPT), "page_count")
    _assert_scrubbed(engine, spy, "count", allocated=False)


def test_unsigned_manifest_change_fails_the_mac(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    def tamper(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        return [encode(MessageKind.MANIFEST, {**msg.fields, "first_token": (msg.fields["first_token"] + 1) % 200})]

    mitm.to_decode = _when(MessageKind.MANIFEST, tamper)  # type: ignore[assignment]
    assert_error_not_answer(_only(engine, "mac", PROMPT), "bad_manifest")


def test_stale_generation_in_a_page_header(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)

    def older(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        fields = {**msg.fields, "generation": msg.fields["generation"] + 1}
        return [encode(MessageKind.PAGE, fields, msg.payloads)]

    mitm.to_decode = _when(MessageKind.PAGE, older)  # type: ignore[assignment]
    assert_error_not_answer(_only(engine, "stale1", PROMPT), "stale_generation")
    _assert_scrubbed(engine, spy, "stale1", allocated=True)


def test_reused_page_generation_from_an_earlier_handoff(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    """A correctly signed handoff that claims pages (and generations) an earlier request already had."""
    spy = AllocationSpy(engine)
    _only(engine, "first", PROMPT)
    first = next(Manifest.from_wire(m.fields) for m in mitm.seen_to_decode if m.kind is MessageKind.MANIFEST)
    claimed = [(e.page_id, e.generation) for e in first.pages]
    mitm.to_decode = HandoffBuffer("second", lambda m, p: resign_handoff(m, p, page_ids=claimed))
    assert_error_not_answer(_only(engine, "second", list(range(90, 130))), "stale_generation")
    _assert_scrubbed(engine, spy, "second", allocated=False)


def test_replayed_manifest_of_another_request(engine: DisaggregatedEngine, mitm: Mitm, reference: LLMEngine) -> None:
    spy = AllocationSpy(engine)
    _only(engine, "victim-x", PROMPT, SCOPE_A)
    x_frames = [encode(m.kind, m.fields, m.payloads) for m in mitm.seen_to_decode
                if m.request_id == "victim-x" and m.kind in (MessageKind.MANIFEST, MessageKind.PAGE, MessageKind.COMMIT)]
    x_manifest = Manifest.from_wire(next(m.fields for m in mitm.seen_to_decode if m.kind is MessageKind.MANIFEST))

    # 1. verbatim replay (X's id) before Y's real handoff: attached to nothing, Y is answered correctly
    injected: list[bool] = []

    def verbatim(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.kind is MessageKind.MANIFEST and not injected:
            injected.append(True)
            return [*x_frames, frames]
        return [frames]

    mitm.to_decode = verbatim
    y_prompt = list(range(100, 140))
    outs = _only(engine, "y1", y_prompt, SCOPE_B)
    assert outs[-1].token_ids == _reference_tokens(reference, y_prompt)

    # 2. X's handoff relabelled as Y's, correctly signed: Y's own checks see another prompt and scope
    x_payloads = [m.payloads[0] for m in mitm.seen_to_decode if m.request_id == "victim-x" and m.kind is MessageKind.PAGE]
    mitm.to_decode = HandoffBuffer("y2", lambda m, p: resign_handoff(x_manifest, x_payloads, request_id="y2"))
    out = assert_error_not_answer(_only(engine, "y2", y_prompt, SCOPE_B), "wrong_request")
    assert "prompt" in (out.error or "")
    _assert_scrubbed(engine, spy, "y2", allocated=False)

    # 3. relabelled without the key: the MAC no longer verifies
    def relabel(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.request_id != "y3":
            return [frames]
        if msg.kind is MessageKind.MANIFEST:
            return [encode(MessageKind.MANIFEST, {**x_manifest.to_wire(), "request_id": "y3"})]
        return []

    mitm.to_decode = relabel
    assert_error_not_answer(_only(engine, "y3", y_prompt, SCOPE_B), "bad_manifest")


def test_missing_page_and_duplicate_page(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)
    mitm.to_decode = _when(MessageKind.PAGE, lambda msg, f: [] if msg.fields["index"] == 1 else [f])  # type: ignore[assignment]
    assert_error_not_answer(_only(engine, "missing", PROMPT), "missing_page")
    _assert_scrubbed(engine, spy, "missing", allocated=True)
    mitm.to_decode = _when(MessageKind.PAGE, lambda msg, f: [f, f] if msg.fields["index"] == 0 else [f])  # type: ignore[assignment]
    assert_error_not_answer(_only(engine, "dup", PROMPT), "duplicate")
    _assert_scrubbed(engine, spy, "dup", allocated=True)


def test_explicit_abort_mid_transfer(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)
    mitm.to_decode = _when(MessageKind.COMMIT, lambda msg, f: [encode(  # type: ignore[assignment]
        MessageKind.ABORT, {"request_id": msg.request_id, "reason": "prefill node fault"})])
    assert_error_not_answer(_only(engine, "aborted", PROMPT), "sender_abort")
    _assert_scrubbed(engine, spy, "aborted", allocated=True)


def test_missing_commit_times_out(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)
    mitm.to_decode = _when(MessageKind.COMMIT, lambda msg, f: [])  # type: ignore[assignment]
    started = time.monotonic()
    assert_error_not_answer(_only(engine, "nocommit", PROMPT), "timeout")
    assert time.monotonic() - started >= 2.5
    _assert_scrubbed(engine, spy, "nocommit", allocated=True)


def test_client_abort_during_handoff_tells_the_prefill_side(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)
    mitm.to_decode = _when(MessageKind.COMMIT, lambda msg, f: [])  # type: ignore[assignment]
    engine.add_request("gone", PROMPT, GREEDY, SCOPE_A)
    deadline = time.monotonic() + 20
    while "COMMIT" not in mitm.kinds_to_decode() and time.monotonic() < deadline:
        assert engine.step() == []
    engine.step()
    assert spy.pages_of("gone")
    engine.abort_request("gone")
    assert not engine.has_unfinished_requests()
    _assert_scrubbed(engine, spy, "gone", allocated=True)
    time.sleep(0.1)
    assert mitm.kinds_to_prefill()[-1] == "ABORT"


def test_prefill_worker_killed_mid_transfer(model_dir: Path, tmp_path: Path) -> None:
    worker = start_worker(model_dir, tmp_path)
    mitm = Mitm(worker.address)
    eng = make_engine(model_dir, mitm.address, timeout_s=2.0)
    try:
        spy = AllocationSpy(eng)
        # the first page gets through; then the worker dies and nothing else ever comes
        def first_page_only(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
            if msg.kind is MessageKind.PAGE and msg.fields["index"] == 0:
                worker.proc.send_signal(signal.SIGKILL)
                return [frames]
            return [frames] if msg.kind is MessageKind.MANIFEST else []

        mitm.to_decode = first_page_only
        assert_error_not_answer(_only(eng, "killed", PROMPT), "timeout")
        assert worker.proc.wait(5) == -signal.SIGKILL
        _assert_scrubbed(eng, spy, "killed", allocated=True)

        # A new worker at the same address: the timeout's probe reaches it, the engine adopts it
        # (new instance id, generation history of the old one forgotten) and serves again.
        old_sender = eng.sender_id
        mitm.to_decode = lambda msg, frames: [frames]
        worker = start_worker(model_dir, tmp_path / "second", listen=worker.address)
        deadline = time.monotonic() + 30
        while eng.sender_id == old_sender and time.monotonic() < deadline:
            eng.step()
        assert eng.sender_id != old_sender
        outs = _only(eng, "after-restart", PROMPT)
        assert outs[-1].finish_reason == "length" and len(outs[-1].token_ids) == GREEDY.max_tokens
    finally:
        eng.close()
        mitm.close()
        worker.stop()


def test_small_decode_pool_waits_for_pages_and_preempts_safely(model_dir: Path, shared_worker: WorkerHandle) -> None:
    """Handoffs that verify while the decode pool is full wait for pages (no timeout once every
    byte is here); running decodes are preempted and recomputed locally. Answers stay exact."""
    eng = make_engine(model_dir, shared_worker.address, kv_cache_tokens=128, max_model_len=128, timeout_s=30.0)
    reference = LLMEngine(decode_config(model_dir, kv_cache_tokens=4096, max_model_len=128))
    try:
        params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
        prompts = {f"p{i}": [(i * 11 + j * 5) % 240 + 7 for j in range(40 + 6 * i)] for i in range(5)}
        for rid, prompt in prompts.items():
            eng.add_request(rid, prompt, params, SCOPE_A)
            reference.add_request(rid, prompt, params, SCOPE_A)
        got, want = drive(eng, list(prompts), timeout_s=120), drive(reference, list(prompts))
        assert {r: o[-1].token_ids for r, o in got.items()} == {r: o[-1].token_ids for r, o in want.items()}
        stats = eng.stats()
        assert stats.handoff_failures == {} and stats.num_handoffs_verified == 5
        assert stats.num_preemptions > 0  # 8 pages cannot hold them all: some were recomputed here
        assert eng.pool_is_zero()
        eng.block_manager.check_invariants()
    finally:
        eng.close()


def test_paranoid_mode_on_the_decode_side(model_dir: Path, shared_worker: WorkerHandle, reference: LLMEngine) -> None:
    """--verify-isolation re-checks I1 for handed-over requests too: a block table pointing at
    another tenant's page aborts that request (no answer), the other one is untouched."""
    eng = make_engine(model_dir, shared_worker.address, verify_isolation=True)
    try:
        params = SamplingParams(max_tokens=12, temperature=0.0)
        eng.add_request("victim", PROMPT, params, SCOPE_A)
        eng.add_request("thief", list(range(100, 140)), params, SCOPE_B)
        outs: dict[str, list[RequestOutput]] = {"victim": [], "thief": []}
        while not (outs["victim"] and outs["thief"]):
            for out in eng.step():
                outs[out.request_id].append(out)
        thief = next(s for s in eng.scheduler.running if s.request_id == "thief")
        victim = next(s for s in eng.scheduler.running if s.request_id == "victim")
        thief.block_table[0] = victim.block_table[0]  # a corrupted table: the bug I1 exists for
        rest = drive(eng, ["victim", "thief"])
        assert rest["thief"][-1].finish_reason == "abort"
        assert all(not o.new_token_ids for o in rest["thief"])  # not one token over the victim's page
        assert rest["victim"][-1].token_ids == _reference_tokens(reference, PROMPT, params)
        assert eng.stats().isolation_incidents == 1
        eng.block_manager.check_invariants()
        assert eng.pool_is_zero()
    finally:
        eng.close()
