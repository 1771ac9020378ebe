"""Regression test of the Aug-Sep 2026 incident (DESIGN.md), on the disaggregated path.

The decode pool is full of tenant A's KV. Tenant B's prompt is longer than the PREFILL pool can
hold, while the decode side was told (by a stale, inflated capacity advertisement) that it fits.
The prefill side must reject it before allocating and send an explicit REJECT; the decode side
must answer B with an error and never decode over A's pages. The incident's own fault, a
one-token placeholder followed by "transfer complete", must fail the decode side's checks too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.disagg.handoff import SentPage, build_manifest
from kvfence.disagg.wire import Message, MessageKind, encode
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.core.outputs import RequestOutput
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.disagg.conftest import WORKER_MAX_MODEL_LEN
from tests.disagg.helpers import (
    KEY,
    AllocationSpy,
    assert_error_not_answer,
    decode_config,
    drive,
    make_engine,
)
from tests.disagg.mitm import Mitm

SCOPE_A, SCOPE_B = b"tenant-a-scope", b"tenant-b-scope"
# No early EOS, and enough tokens that the first A request to be handed over is still decoding when
# the last one arrives (on a loaded machine handoffs can lag many decode steps): A holds its pages.
A_PARAMS = SamplingParams(max_tokens=80, temperature=0.0, ignore_eos=True)
A_PROMPTS = [[(7 * i + j) % 250 + 5 for j in range(160)] for i in range(4)]  # 4 x 10 full prompt pages, 15 at most of the 64
B_PROMPT = [(3 * j) % 250 + 5 for j in range(WORKER_MAX_MODEL_LEN + 90)]  # longer than the prefill side holds


class Incident:
    """MITM behaviour: advertise a bigger prefill context than the worker has; optionally turn
    the worker's REJECT into the incident's placeholder + "transfer complete"."""

    def __init__(self) -> None:
        self.placeholder: str | None = None  # None | "placeholder" | "commit-only"

    def __call__(self, msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.kind is MessageKind.WELCOME:
            return [encode(MessageKind.WELCOME, {**msg.fields, "max_model_len": 1024, "num_pages": 64})]
        if msg.kind is MessageKind.REJECT and self.placeholder is not None:
            rid = msg.fields["request_id"]
            commit = encode(MessageKind.COMMIT, {"request_id": rid, "page_count": 1})
            if self.placeholder == "commit-only":
                return [commit]
            page = SentPage(page_id=0, generation=0, shared=False, payload=bytes(self.page_nbytes))
            manifest = build_manifest(
                request_id=rid, sender_id=self.sender_id, prompt_token_ids=[1], scope_key=SCOPE_B,
                page_size=16, pages=[page], first_token=42, key=KEY,
            )
            return [
                encode(MessageKind.MANIFEST, manifest.to_wire()),
                encode(MessageKind.PAGE, {"request_id": rid, "index": 0, "page_id": 0, "generation": 0}, [page.payload]),
                commit,
            ]
        return [frames]

    sender_id = ""
    page_nbytes = 0


@pytest.fixture
def incident(model_dir: Path, mitm: Mitm) -> Iterator[tuple[DisaggregatedEngine, Incident]]:
    behaviour = Incident()
    mitm.to_decode = behaviour
    eng = make_engine(model_dir, mitm.address, kv_cache_tokens=1024, max_model_len=1024, timeout_s=10.0)
    behaviour.sender_id, behaviour.page_nbytes = eng.sender_id, eng.page_nbytes
    yield eng, behaviour
    eng.close()


def _fill_with_tenant_a(eng: DisaggregatedEngine) -> dict[str, list[RequestOutput]]:
    outs: dict[str, list[RequestOutput]] = {f"a{i}": [] for i in range(len(A_PROMPTS))}
    for rid, prompt in zip(outs, A_PROMPTS, strict=True):
        eng.add_request(rid, prompt, A_PARAMS, SCOPE_A)
    while any(len(o) < 2 for o in outs.values()):  # every A request is decoding over its pages
        for out in eng.step():
            outs[out.request_id].append(out)
    assert eng.stats().num_used_pages >= 44  # 11 pages each: prompt plus the first token
    return outs


@pytest.mark.parametrize("placeholder", [None, "placeholder", "commit-only"])
def test_tenant_b_gets_an_error_not_an_answer_over_tenant_a_pages(
    incident: tuple[DisaggregatedEngine, Incident], model_dir: Path, placeholder: str | None
) -> None:
    eng, behaviour = incident
    behaviour.placeholder = placeholder
    spy = AllocationSpy(eng)
    a_outs = _fill_with_tenant_a(eng)
    a_pages = {s.request_id: s.block_table[:10] for s in eng.scheduler.running}  # full prompt pages
    before = {rid: spy.snapshot(pages) for rid, pages in a_pages.items()}

    # The front believes the inflated advertisement: B is accepted here ...
    eng.add_request("b", B_PROMPT, SamplingParams(max_tokens=16, temperature=0.0), SCOPE_B)
    b_outs: list[RequestOutput] = []
    while not b_outs:
        for out in eng.step():
            (b_outs if out.request_id == "b" else a_outs[out.request_id]).append(out)

    # ... and the prefill side rejects it; whatever the wire then claims, B gets no answer.
    expected = {None: "rejected", "placeholder": "wrong_request", "commit-only": "out_of_order"}[placeholder]
    out = assert_error_not_answer(b_outs, expected)
    if placeholder is None:
        assert "maximum context length" in (out.error or "")
    assert "b" not in spy.tables  # the decode side never allocated a page for B
    assert {rid: spy.snapshot(pages) for rid, pages in a_pages.items()} == before  # A's KV untouched

    # A finishes with exactly the answers a colocated engine gives.
    rest = drive(eng, list(a_outs))
    reference = LLMEngine(decode_config(model_dir))
    for i, rid in enumerate(a_outs):
        reference.add_request(rid, A_PROMPTS[i], A_PARAMS, SCOPE_A)
    expected_tokens = {rid: o[-1].token_ids for rid, o in drive(reference, list(a_outs)).items()}
    assert {rid: o[-1].token_ids for rid, o in rest.items()} == expected_tokens
    assert eng.pool_is_zero()
    eng.block_manager.check_invariants()
