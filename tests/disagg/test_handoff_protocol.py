"""I4 as pure logic: the manifest, the checksums and the receiver state machine, tried exhaustively."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.disagg.handoff import (
    Expectation,
    HandoffPhase,
    HandoffReceiver,
    SenderLedgerView,
    SentPage,
    build_manifest,
)
from kvfence.disagg.protocol import (
    HandoffError,
    HandoffFailure,
    Manifest,
    expected_page_count,
    page_checksum,
)
from kvfence.disagg.wire import MessageKind, WireError, decode, encode

KEY = bytes(range(32))
PAGE_SIZE = 4
NBYTES = 24
SENDER = "sender-1"


def _pages(n: int, *, start_id: int = 0, generation: int = 0, seed: int = 0) -> list[SentPage]:
    return [
        SentPage(page_id=start_id + i, generation=generation, shared=False,
                 payload=bytes((seed + i * 7 + j) % 256 for j in range(NBYTES)))
        for i in range(n)
    ]


def _setup(
    prompt: list[int] | None = None, *, key: bytes = KEY, ledger: SenderLedgerView | None = None,
    request_id: str = "r1", scope: bytes = b"scope-a", pages: list[SentPage] | None = None, **manifest_kw: Any,
) -> tuple[HandoffReceiver, Manifest, list[SentPage]]:
    prompt = prompt if prompt is not None else list(range(10))
    pages = pages if pages is not None else _pages(expected_page_count(len(prompt), PAGE_SIZE))
    kw: dict[str, Any] = {
        "request_id": request_id, "sender_id": SENDER, "prompt_token_ids": prompt, "scope_key": scope,
        "page_size": PAGE_SIZE, "pages": pages, "first_token": 5, "key": key, **manifest_kw,
    }
    manifest = build_manifest(**kw)
    receiver = HandoffReceiver(
        Expectation(request_id, SENDER, tuple(prompt), scope, PAGE_SIZE, NBYTES, vocab_size=100, key=key),
        ledger if ledger is not None else SenderLedgerView(),
    )
    return receiver, manifest, pages


def _deliver(receiver: HandoffReceiver, manifest: Manifest, pages: list[SentPage]) -> None:
    receiver.on_manifest(manifest)
    for e, p in zip(manifest.pages, pages, strict=True):
        receiver.on_page(manifest.request_id, e.index, e.page_id, e.generation, len(p.payload))
    receiver.on_commit(manifest.request_id, manifest.page_count)
    receiver.verify({i: p.payload for i, p in enumerate(pages)})


def _fails(reason: HandoffFailure, fn: Any, *args: Any) -> HandoffError:
    with pytest.raises(HandoffError) as info:
        fn(*args)
    assert info.value.reason is reason, info.value
    return info.value


def test_page_count_is_ceil() -> None:
    assert [expected_page_count(n, 4) for n in (1, 3, 4, 5, 8, 9)] == [1, 1, 1, 2, 2, 3]
    with pytest.raises(ValueError):
        expected_page_count(0, 4)


def test_happy_path_verifies_and_records_generations() -> None:
    ledger = SenderLedgerView()
    receiver, manifest, pages = _setup(ledger=ledger)
    _deliver(receiver, manifest, pages)
    assert receiver.phase is HandoffPhase.VERIFIED
    # the same owned pages at the same generation may never be handed over again
    again, m2, _p2 = _setup(ledger=ledger, request_id="r2")
    _fails(HandoffFailure.STALE_GENERATION, again.on_manifest, m2)


def test_manifest_survives_the_wire() -> None:
    _, manifest, _ = _setup(first_logprobs={5: -0.5, 7: -1.25}, generator_state=b"\x01\x02")
    frames = encode(MessageKind.MANIFEST, manifest.to_wire())
    back = Manifest.from_wire(decode(frames).fields)
    assert back == manifest
    assert back.mac_is_valid(KEY) and not back.mac_is_valid(b"another key")


def test_checksum_is_bound_to_request_index_page_and_generation() -> None:
    data = b"x" * NBYTES
    base = page_checksum(data, request_id="a", index=0, page_id=3, generation=1, key=KEY)
    assert base == page_checksum(data, request_id="a", index=0, page_id=3, generation=1, key=KEY)
    others = [
        page_checksum(data, request_id="b", index=0, page_id=3, generation=1, key=KEY),
        page_checksum(data, request_id="a", index=1, page_id=3, generation=1, key=KEY),
        page_checksum(data, request_id="a", index=0, page_id=4, generation=1, key=KEY),
        page_checksum(data, request_id="a", index=0, page_id=3, generation=2, key=KEY),
        page_checksum(data, request_id="a", index=0, page_id=3, generation=1, key=b""),
        page_checksum(b"y" + data[1:], request_id="a", index=0, page_id=3, generation=1, key=KEY),
    ]
    assert base not in others and len(set(others)) == len(others)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"request_id": "other"}, HandoffFailure.WRONG_REQUEST),
        ({"sender_id": "impostor"}, HandoffFailure.WRONG_REQUEST),
        ({"prompt_len": 1}, HandoffFailure.WRONG_REQUEST),  # the incident's one-token placeholder
        ({"prompt_digest": bytes(32)}, HandoffFailure.WRONG_REQUEST),
        ({"scope_digest": bytes(32)}, HandoffFailure.WRONG_REQUEST),
        ({"page_size": 8}, HandoffFailure.BAD_MANIFEST),
        ({"page_nbytes": NBYTES + 1}, HandoffFailure.BAD_MANIFEST),
        ({"first_token": 100}, HandoffFailure.BAD_MANIFEST),
    ],
)
def test_manifest_field_mismatch_fails(change: dict[str, Any], reason: HandoffFailure) -> None:
    receiver, manifest, _ = _setup()
    forged = dataclasses.replace(manifest, **change).signed(KEY)  # even a correctly signed lie
    _fails(reason, receiver.on_manifest, forged)
    assert receiver.phase is HandoffPhase.FAILED


def test_unsigned_change_fails_the_mac() -> None:
    receiver, manifest, _ = _setup()
    _fails(HandoffFailure.BAD_MANIFEST, receiver.on_manifest, dataclasses.replace(manifest, first_token=6))


@pytest.mark.parametrize("num_pages", [0, 2, 4])
def test_wrong_page_count_fails(num_pages: int) -> None:
    receiver, manifest, _ = _setup()  # 10 tokens / 4 = 3 pages
    entries = tuple(dataclasses.replace(manifest.pages[0], index=i, page_id=50 + i) for i in range(num_pages))
    _fails(HandoffFailure.PAGE_COUNT, receiver.on_manifest, dataclasses.replace(manifest, pages=entries).signed(KEY))


def test_stale_generation_rules() -> None:
    ledger = SenderLedgerView()
    first, m1, p1 = _setup(ledger=ledger, pages=_pages(3, generation=5))
    _deliver(first, m1, p1)
    # lower generation of a page already seen: stale
    r, m, _ = _setup(ledger=ledger, request_id="r2", pages=_pages(3, generation=4))
    _fails(HandoffFailure.STALE_GENERATION, r.on_manifest, m)
    # newer generation: fine
    r, m, p = _setup(ledger=ledger, request_id="r3", pages=_pages(3, generation=6))
    _deliver(r, m, p)
    # a shared (sealed prefix) page may reappear at its generation; an owned one may not
    shared = [dataclasses.replace(p, shared=True) for p in _pages(3, start_id=20, generation=1)]
    r, m, p = _setup(ledger=ledger, request_id="r4", pages=shared)
    _deliver(r, m, p)
    r, m, p = _setup(ledger=ledger, request_id="r5", pages=shared)
    _deliver(r, m, p)
    r, m, _ = _setup(ledger=ledger, request_id="r6", pages=_pages(3, start_id=20, generation=1))
    _fails(HandoffFailure.STALE_GENERATION, r.on_manifest, m)
    ledger.forget_sender(SENDER)
    r, m, p = _setup(ledger=ledger, request_id="r7", pages=_pages(3, generation=0))
    _deliver(r, m, p)


def test_page_and_commit_order() -> None:
    receiver, _, _ = _setup()
    _fails(HandoffFailure.OUT_OF_ORDER, receiver.on_page, "r1", 0, 0, 0, NBYTES)
    receiver, _, _ = _setup()
    _fails(HandoffFailure.OUT_OF_ORDER, receiver.on_commit, "r1", 3)
    receiver, manifest, _ = _setup()
    receiver.on_manifest(manifest)
    _fails(HandoffFailure.DUPLICATE, receiver.on_manifest, manifest)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (("r2", 0, 0, 0, NBYTES), HandoffFailure.WRONG_REQUEST),
        (("r1", 3, 0, 0, NBYTES), HandoffFailure.BAD_PAGE),
        (("r1", -1, 0, 0, NBYTES), HandoffFailure.BAD_PAGE),
        (("r1", 0, 9, 0, NBYTES), HandoffFailure.BAD_PAGE),
        (("r1", 0, 0, 1, NBYTES), HandoffFailure.STALE_GENERATION),
        (("r1", 0, 0, 0, NBYTES - 1), HandoffFailure.BAD_PAGE),
    ],
)
def test_bad_page_header_fails(header: tuple[str, int, int, int, int], reason: HandoffFailure) -> None:
    receiver, manifest, _ = _setup()
    receiver.on_manifest(manifest)
    _fails(reason, receiver.on_page, *header)


def test_duplicate_and_missing_pages() -> None:
    receiver, manifest, _ = _setup()
    receiver.on_manifest(manifest)
    receiver.on_page("r1", 0, 0, 0, NBYTES)
    _fails(HandoffFailure.DUPLICATE, receiver.on_page, "r1", 0, 0, 0, NBYTES)
    receiver, manifest, _ = _setup()
    receiver.on_manifest(manifest)
    receiver.on_page("r1", 0, 0, 0, NBYTES)
    receiver.on_page("r1", 2, 2, 0, NBYTES)
    err = _fails(HandoffFailure.MISSING_PAGE, receiver.on_commit, "r1", 3)
    assert "[1]" in str(err)
    receiver, manifest, _ = _setup()
    receiver.on_manifest(manifest)
    _fails(HandoffFailure.PAGE_COUNT, receiver.on_commit, "r1", 2)


def test_checksum_is_recomputed_from_pool_bytes() -> None:
    receiver, manifest, pages = _setup()
    receiver.on_manifest(manifest)
    for e in manifest.pages:
        receiver.on_page("r1", e.index, e.page_id, e.generation, NBYTES)
    receiver.on_commit("r1", 3)
    pool = {i: p.payload for i, p in enumerate(pages)}
    pool[1] = pool[1][:5] + bytes([pool[1][5] ^ 1]) + pool[1][6:]
    _fails(HandoffFailure.CHECKSUM, receiver.verify, pool)
    # once failed, always failed: nothing can revive it
    _fails(HandoffFailure.CHECKSUM, receiver.verify, {i: p.payload for i, p in enumerate(pages)})
    assert receiver.phase is HandoffPhase.FAILED


def test_verify_needs_every_page() -> None:
    receiver, manifest, pages = _setup()
    receiver.on_manifest(manifest)
    for e in manifest.pages:
        receiver.on_page("r1", e.index, e.page_id, e.generation, NBYTES)
    receiver.on_commit("r1", 3)
    _fails(HandoffFailure.MISSING_PAGE, receiver.verify, {0: pages[0].payload, 1: pages[1].payload})


def test_malformed_manifest_is_rejected() -> None:
    _, manifest, _ = _setup()
    wire = manifest.to_wire()
    for broken in ({**wire, "prompt_len": "10"}, {**wire, "pages": "x"}, {**wire, "mac": "zz"},
                   {k: v for k, v in wire.items() if k != "scope_digest"}, [1, 2], {**wire, "pages": [[0, 1, 2]]}):
        _fails(HandoffFailure.BAD_MANIFEST, Manifest.from_wire, broken)


# ---- property tests: any single change, any ordering --------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    prompt_len=st.integers(1, 17),
    flip_page=st.integers(0, 100),
    flip_byte=st.integers(0, NBYTES - 1),
    flip_bit=st.integers(0, 7),
)
def test_any_flipped_bit_in_any_page_fails(prompt_len: int, flip_page: int, flip_byte: int, flip_bit: int) -> None:
    receiver, manifest, pages = _setup(list(range(prompt_len)))
    receiver.on_manifest(manifest)
    for e in manifest.pages:
        receiver.on_page("r1", e.index, e.page_id, e.generation, NBYTES)
    receiver.on_commit("r1", manifest.page_count)
    pool = {i: bytearray(p.payload) for i, p in enumerate(pages)}
    pool[flip_page % len(pages)][flip_byte] ^= 1 << flip_bit
    _fails(HandoffFailure.CHECKSUM, receiver.verify, {i: bytes(b) for i, b in pool.items()})


_EVENTS = st.lists(
    st.one_of(
        st.just(("manifest",)),
        st.tuples(st.just("page"), st.integers(-1, 4)),
        st.tuples(st.just("commit"), st.integers(1, 4)),
        st.just(("verify",)),
    ),
    max_size=10,
)


@settings(max_examples=300, deadline=None)
@given(events=_EVENTS)
def test_only_the_complete_protocol_verifies(events: list[tuple[Any, ...]]) -> None:
    """Random event sequences: VERIFIED only when manifest, each page once, commit, verify happened."""
    receiver, manifest, pages = _setup(list(range(10)))  # 3 pages
    sent: list[int] = []
    clean = True
    saw = {"manifest": 0, "commit": 0}
    for ev in events:
        try:
            if ev[0] == "manifest":
                saw["manifest"] += 1
                receiver.on_manifest(manifest)
            elif ev[0] == "page":
                i = ev[1]
                e = manifest.pages[i] if 0 <= i < 3 else manifest.pages[0]
                receiver.on_page("r1", i, e.page_id, e.generation, NBYTES)
                sent.append(i)
            elif ev[0] == "commit":
                saw["commit"] += 1
                receiver.on_commit("r1", ev[1])
            else:
                receiver.verify({i: p.payload for i, p in enumerate(pages)})
        except HandoffError:
            clean = False
            assert receiver.phase is HandoffPhase.FAILED
    if receiver.phase is HandoffPhase.VERIFIED:
        assert clean and saw["manifest"] == 1 and sorted(sent) == [0, 1, 2]
        kinds = [e[0] for e in events]
        assert kinds.index("manifest") < kinds.index("commit") < kinds.index("verify")


def test_wire_framing_rejects_garbage() -> None:
    frames = encode(MessageKind.PAGE, {"request_id": "r", "index": 1}, [b"abc"])
    msg = decode(frames)
    assert msg.kind is MessageKind.PAGE and msg.request_id == "r" and msg.payloads == [b"abc"]
    head = frames[0]
    for bad in ([], [b"KV"], [b"XXXX" + head[4:]], [head[:4] + b"\x00\x09" + head[6:]],
                [head[:6] + b"\x63" + head[7:]], [head[:7] + b"{not json"], [head[:7] + b"[1]"],
                [head[:7] + os.urandom(3) + b"\xff"]):
        with pytest.raises(WireError):
            decode(bad)


@settings(max_examples=20, deadline=None)
@given(order=st.permutations([0, 1, 2]))
def test_pages_may_arrive_in_any_order(order: list[int]) -> None:
    receiver, manifest, pages = _setup()
    receiver.on_manifest(manifest)
    for i in order:
        e = manifest.pages[i]
        receiver.on_page("r1", i, e.page_id, e.generation, NBYTES)
    receiver.on_commit("r1", 3)
    receiver.verify({i: p.payload for i, p in enumerate(pages)})
    assert receiver.phase is HandoffPhase.VERIFIED
