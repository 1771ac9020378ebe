"""Round-2 red team on the disaggregated handoff (I4), through a real worker and a man in the middle.

Each attack is a handoff the decode side must never decode over: one it never asked for, a replay,
a transfer cut short, pages of another configuration, a worker that answers one tenant's request
with another tenant's handoff. All of these held on the code as it was (the receiver's checks);
these tests pin them down end to end: no answer, an error naming the reason, and every decode page
the attempt touched zero afterwards (I2).
"""

from __future__ import annotations

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
from tests.disagg.helpers import (
    AllocationSpy,
    assert_error_not_answer,
    decode_config,
    drive,
    make_engine,
    resign_handoff,
)
from tests.disagg.mitm import Mitm

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)
SCOPE_A = b"scope-tenant-a"
SCOPE_B = b"scope-tenant-b"
PROMPT_A = list(range(40, 80))  # 40 tokens: 3 pages of 16, the last one partial
PROMPT_B = list(range(120, 160))


@pytest.fixture
def engine(model_dir: Path, mitm: Mitm) -> Iterator[DisaggregatedEngine]:
    eng = make_engine(model_dir, mitm.address, timeout_s=3.0)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> LLMEngine:
    return LLMEngine(decode_config(model_dir))


def _reference_tokens(reference: LLMEngine, prompt: list[int], scope: bytes) -> list[int]:
    rid = f"ref-{time.monotonic_ns()}"
    reference.add_request(rid, prompt, GREEDY, scope)
    return drive(reference, [rid])[rid][-1].token_ids


def _only(engine: DisaggregatedEngine, rid: str, prompt: list[int], scope: bytes) -> list[RequestOutput]:
    engine.add_request(rid, prompt, GREEDY, scope)
    return drive(engine, [rid], timeout_s=30)[rid]


def _handoff_frames(mitm: Mitm, rid: str) -> list[list[bytes]]:
    """The handoff of ``rid`` as it went to the decode side, re-encoded verbatim."""
    kinds = (MessageKind.MANIFEST, MessageKind.PAGE, MessageKind.COMMIT)
    return [encode(m.kind, m.fields, m.payloads) for m in mitm.seen_to_decode if m.request_id == rid and m.kind in kinds]


def _manifest_and_pages(mitm: Mitm, rid: str) -> tuple[Manifest, list[bytes]]:
    seen = [m for m in mitm.seen_to_decode if m.request_id == rid]
    manifest = Manifest.from_wire(next(m.fields for m in seen if m.kind is MessageKind.MANIFEST))
    return manifest, [m.payloads[0] for m in seen if m.kind is MessageKind.PAGE]


def _assert_clean(engine: DisaggregatedEngine) -> None:
    assert engine.stats().num_used_pages == 0
    assert engine.pool_is_zero()
    engine.block_manager.check_invariants()


def _inject_before_first(kind: MessageKind, frames_to_inject: list[list[bytes]]) -> object:
    done: list[bool] = []

    def hook(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.kind is kind and not done:
            done.append(True)
            return [*frames_to_inject, frames]
        return [frames]

    return hook


def test_a_handoff_the_decode_side_never_asked_for_is_never_attached(
        engine: DisaggregatedEngine, mitm: Mitm, reference: LLMEngine) -> None:
    """A correctly signed handoff (tenant A's real pages) for an id nobody submitted yet, sent just
    before the real traffic of another request: nothing is allocated or answered for it, and when that
    id is submitted later (by tenant B), B gets its own prompt's answer from its own handoff."""
    spy = AllocationSpy(engine)
    _only(engine, "a1", PROMPT_A, SCOPE_A)
    manifest, pages = _manifest_and_pages(mitm, "a1")
    forged = resign_handoff(manifest, pages, request_id="ghost")
    mitm.to_decode = _inject_before_first(MessageKind.MANIFEST, forged)  # type: ignore[assignment]
    verified = engine.stats().num_handoffs_verified
    outs = _only(engine, "warm", PROMPT_A, SCOPE_A)
    assert outs[-1].finish_reason == "length"
    assert engine.stats().num_handoffs_verified == verified + 1  # warm only
    assert spy.pages_of("ghost") == []
    _assert_clean(engine)
    mitm.to_decode = lambda msg, frames: [frames]
    ghost = _only(engine, "ghost", PROMPT_B, SCOPE_B)
    assert ghost[-1].token_ids == _reference_tokens(reference, PROMPT_B, SCOPE_B)


def test_a_replayed_handoff_is_ignored_after_the_request_and_refused_for_a_reused_id(
        engine: DisaggregatedEngine, mitm: Mitm) -> None:
    spy = AllocationSpy(engine)
    first = _only(engine, "r1", PROMPT_A, SCOPE_A)
    assert first[-1].finish_reason == "length"
    replay = _handoff_frames(mitm, "r1")
    # 1. verbatim, while another request is in flight: r1 is finished, nothing attaches to it
    mitm.to_decode = _inject_before_first(MessageKind.MANIFEST, replay)  # type: ignore[assignment]
    outs = _only(engine, "other", PROMPT_B, SCOPE_B)
    assert outs[-1].finish_reason == "length" and all(o.request_id == "other" for o in outs)
    _assert_clean(engine)
    # 2. the id is reused for a new request and the old handoff is played instead of the new one:
    # its pages were handed over before at the same generation, so the ledger refuses them
    replayed: list[bool] = []

    def swap(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.request_id != "r1":
            return [frames]
        if msg.kind is MessageKind.MANIFEST and not replayed:
            replayed.append(True)
            return replay
        return []

    mitm.to_decode = swap
    out = assert_error_not_answer(_only(engine, "r1", PROMPT_A, SCOPE_A), "stale_generation")
    assert "generation" in (out.error or "")
    assert engine.pool_is_zero(spy.pages_of("r1"))
    _assert_clean(engine)


@pytest.mark.parametrize(("cut", "reason"), [
    ("page payload halved", "bad_page"),
    ("page payload one byte short", "bad_page"),
    ("page without payload", "bad_page"),
    ("manifest fields missing", "bad_manifest"),
    ("stream cut after the manifest", "timeout"),
])
def test_a_truncated_transfer_is_an_error_not_an_answer(engine: DisaggregatedEngine, mitm: Mitm, cut: str,
                                                        reason: str) -> None:
    spy = AllocationSpy(engine)
    rid = "cut-" + cut.replace(" ", "-")

    def truncate(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.request_id != rid:
            return [frames]
        if msg.kind is MessageKind.MANIFEST and cut == "manifest fields missing":
            fields = {k: v for k, v in msg.fields.items() if k not in ("pages", "mac")}
            return [encode(MessageKind.MANIFEST, fields)]
        if msg.kind is not MessageKind.MANIFEST and cut == "stream cut after the manifest":
            return []
        if msg.kind is MessageKind.PAGE and msg.fields["index"] == 1:
            payload = msg.payloads[0]
            if cut == "page payload halved":
                return [encode(MessageKind.PAGE, msg.fields, [payload[: len(payload) // 2]])]
            if cut == "page payload one byte short":
                return [encode(MessageKind.PAGE, msg.fields, [payload[:-1]])]
            if cut == "page without payload":
                return [encode(MessageKind.PAGE, msg.fields)]
        return [frames]

    mitm.to_decode = truncate
    assert_error_not_answer(_only(engine, rid, PROMPT_A, SCOPE_A), reason)
    assert engine.pool_is_zero(spy.pages_of(rid))
    _assert_clean(engine)


def test_pages_of_another_kv_layout_are_refused_even_when_signed(engine: DisaggregatedEngine, mitm: Mitm) -> None:
    """A sender holding the key but running another configuration (another dtype or head layout:
    pages of another size) signs them correctly; the manifest's page geometry is refused before any
    page is allocated here."""
    spy = AllocationSpy(engine)
    rid = "layout"
    held: dict[str, object] = {}

    def other_layout(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.request_id != rid:
            return [frames]
        if msg.kind is MessageKind.MANIFEST:
            held["manifest"] = Manifest.from_wire(msg.fields)
            held["pages"] = []
            return []
        if msg.kind is MessageKind.PAGE:
            held["pages"].append(msg.payloads[0] * 2)  # type: ignore[attr-defined]  # e.g. fp32 instead of bf16
            return []
        if msg.kind is MessageKind.COMMIT:
            return resign_handoff(held["manifest"], held["pages"])  # type: ignore[arg-type]
        return [frames]

    mitm.to_decode = other_layout
    out = assert_error_not_answer(_only(engine, rid, PROMPT_A, SCOPE_A), "bad_manifest")
    assert "geometry" in (out.error or "")
    assert spy.pages_of(rid) == []
    _assert_clean(engine)


def test_a_worker_that_answers_one_tenants_request_with_anothers_handoff(
        engine: DisaggregatedEngine, mitm: Mitm) -> None:
    """Two tenants in flight at once; the worker (holding the key: a bug, not a forger) sends A's
    handoff under B's request id and B's under A's, each correctly signed. Each side's own checks
    (prompt and scope digests bound into the manifest) refuse them: neither tenant reads the other's KV."""
    spy = AllocationSpy(engine)
    held: dict[str, tuple[Manifest, list[bytes]]] = {}
    pending: dict[str, list[bytes]] = {"ta": [], "tb": []}
    manifests: dict[str, Manifest] = {}

    def crossed(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        rid = msg.request_id
        if rid not in pending:
            return [frames]
        if msg.kind is MessageKind.MANIFEST:
            manifests[rid] = Manifest.from_wire(msg.fields)
            return []
        if msg.kind is MessageKind.PAGE:
            pending[rid].append(msg.payloads[0])
            return []
        if msg.kind is MessageKind.COMMIT:
            held[rid] = (manifests[rid], pending[rid])
            if len(held) < 2:
                return []
            a_manifest, a_pages = held["ta"]
            b_manifest, b_pages = held["tb"]
            return [*resign_handoff(a_manifest, a_pages, request_id="tb"),
                    *resign_handoff(b_manifest, b_pages, request_id="ta")]
        return [frames]

    mitm.to_decode = crossed
    engine.add_request("ta", PROMPT_A, GREEDY, SCOPE_A)
    engine.add_request("tb", PROMPT_B, GREEDY, SCOPE_B)
    outs = drive(engine, ["ta", "tb"], timeout_s=30)
    for rid in ("ta", "tb"):
        out = assert_error_not_answer(outs[rid], "wrong_request")
        assert "prompt" in (out.error or "") or "scope" in (out.error or "")
        assert engine.pool_is_zero(spy.pages_of(rid))
    _assert_clean(engine)
