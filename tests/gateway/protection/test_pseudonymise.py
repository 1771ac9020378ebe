"""Pseudonymise then restore gives back exactly the original, streamed at every chunk boundary."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.gateway.protection.detect.detector import build_detector
from kvfence.gateway.protection.detect.findings import Category, Finding
from kvfence.gateway.protection.pseudonymise.placeholders import PLACEHOLDER, Pseudonymiser
from kvfence.gateway.protection.pseudonymise.streaming import StreamRestorer

DETECTOR = build_detector(use_presidio=False)

ANSWER = ("Sure. I emailed maria.lopez@northwind.example.com and bob@contoso.io, then called "
          "(415) 555-0132; the refund goes to DE89 3704 0044 0532 0130 00. Again: maria.lopez@northwind.example.com.")


def pseudonymise(text: str) -> tuple[str, Pseudonymiser]:
    pseudonymiser = Pseudonymiser([text])
    return pseudonymiser.apply(text, DETECTOR.scan(text)), pseudonymiser


def test_same_value_same_placeholder() -> None:
    masked, p = pseudonymise(ANSWER)
    assert masked.count("<EMAIL_1>") == 2
    assert "<EMAIL_2>" in masked and "<PHONE_1>" in masked and "<IBAN_1>" in masked
    assert "maria" not in masked and "555" not in masked
    assert p.restore(masked) == ANSWER


def test_conversation_turns_get_the_same_placeholders() -> None:
    first = ["I am ann@example.org", "Hi"]
    second = [*first, "Thanks ann, note bob@example.org too"]
    def mask(texts: list[str]) -> list[str]:
        p = Pseudonymiser(texts)
        return [p.apply(t, DETECTOR.scan(t)) for t in texts]
    assert mask(second)[:2] == mask(first)


def test_secrets_are_replaced_but_never_restored() -> None:
    text = "deploy with token ghp_R2d7Kq9LmX4vT8bN1cZ6wY3pH5sJ0gF2aE7u and mail ops@acme.io"
    masked, p = pseudonymise(text)
    assert "<GITHUB_TOKEN_1>" in masked and "ghp_" not in masked
    restored = p.restore(masked)
    assert "<GITHUB_TOKEN_1>" in restored and "ops@acme.io" in restored


def test_user_typed_placeholders_are_not_reused() -> None:
    text = "Template says <EMAIL_1>; mine is kim@example.net"
    masked, p = pseudonymise(text)
    assert "<EMAIL_2>" in masked
    assert p.restore(masked) == text


def stream(restorer: StreamRestorer, chunks: list[str]) -> str:
    return "".join(restorer.feed(c) for c in chunks) + restorer.finish()


@pytest.mark.parametrize("text", [ANSWER, "<EMAIL_1><EMAIL_1>", "a <EMA b <EMAIL_1 c <EMAIL_1>", "<<EMAIL_1>>"])
def test_every_split_point_restores_exactly(text: str) -> None:
    masked, p = pseudonymise(ANSWER)
    target_masked = masked if text == ANSWER else text
    expected = p.restore(target_masked)
    for cut in range(len(target_masked) + 1):
        restorer = StreamRestorer(p.restore_table)
        assert stream(restorer, [target_masked[:cut], target_masked[cut:]]) == expected
    # and every pair of cuts (three chunks), over the placeholder-dense region
    for a in range(0, 60):
        for b in range(a, 70):
            restorer = StreamRestorer(p.restore_table)
            chunks = [target_masked[:a], target_masked[a:b], target_masked[b:]]
            assert stream(restorer, chunks) == expected


def test_one_character_chunks_and_bounded_delay() -> None:
    masked, p = pseudonymise(ANSWER)
    restorer = StreamRestorer(p.restore_table)
    longest = p.longest_placeholder
    out = []
    for ch in masked:
        out.append(restorer.feed(ch))
        assert restorer.held <= longest - 1
    out.append(restorer.finish())
    assert "".join(out) == ANSWER


def test_no_table_means_no_delay() -> None:
    restorer = StreamRestorer({})
    assert restorer.feed("<EMA") == "<EMA"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a@b.io", "x@y.org", " ", "text ", "<", ">", "<EMAIL_", "1>", "é", "\n"]),
                max_size=30),
       st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_round_trip_property(pieces: list[str], cuts: list[int]) -> None:
    text = "".join(pieces)
    masked, p = pseudonymise(text)
    assert p.restore(masked) == text
    bounds = sorted({min(c, len(masked)) for c in cuts})
    chunks, prev = [], 0
    for bound in bounds:
        chunks.append(masked[prev:bound])
        prev = bound
    chunks.append(masked[prev:])
    assert stream(StreamRestorer(p.restore_table), chunks) == text


def test_placeholder_shape() -> None:
    p = Pseudonymiser()
    ph = p.placeholder_for("x", Finding(0, 1, "US_SSN", Category.PII, 1.0, "t"))
    assert ph == "<US_SSN_1>" and PLACEHOLDER.fullmatch(ph)
