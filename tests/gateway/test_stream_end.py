"""``stream_end``: a relayed stream goes out in whole events, and its end is judged from its tail."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kvfence.gateway.transport.stream_end import StreamTail, stream_is_complete


def _event(text: str, finish: str | None = None, **extra: object) -> bytes:
    body = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
USAGE = b'data: {"choices": [], "usage": {"completion_tokens": 3}}\n\n'
FULL = _event("Hel") + b": keep-alive\n\n" + _event("lo") + _event("", "stop") + USAGE + DONE


def _relay(reads: list[bytes]) -> tuple[bytes, bool]:
    tail = StreamTail()
    out = b"".join(tail.take(r) for r in reads)
    rest, complete = tail.end(b"")
    return out + rest, complete


def test_end_markers_decide() -> None:
    assert stream_is_complete(FULL)
    assert stream_is_complete(_event("a") + _event("", "length"))          # no [DONE]: some servers
    assert stream_is_complete(_event("a", "stop") + USAGE + b": bye\n\n")  # usage chunk and comments after it
    assert stream_is_complete(b'data: {"error": {"message": "overloaded"}}\n\n')
    assert stream_is_complete(_event("a", "stop") + b"data: [DONE]\n")     # [DONE] missing its blank line
    assert stream_is_complete(_event("a") + _event("", "stop")[:-1])      # a whole last chunk, likewise
    assert stream_is_complete(_event("a") + _event("", "stop")[:-2])
    assert not stream_is_complete(_event("a") + _event("b"))              # closed before the end
    assert not stream_is_complete(_event("a", "stop")[:-3])               # stopped inside the last event
    assert not stream_is_complete(_event("a", "stop") + b"data: [DO")
    assert not stream_is_complete(_event("a") + USAGE)                    # usage, but no finish before it
    assert not stream_is_complete(b"")
    assert not stream_is_complete(b"data: not json\n\n")


def test_a_whole_last_event_without_its_blank_line_goes_out_with_one() -> None:
    for newline in (b"\n", b"\r\n", b"\r"):
        body = (_event("a") + _event("", "stop")).replace(b"\n", newline)
        for cut in (len(newline), 2 * len(newline)):  # one line end left, or none
            sent, complete = _relay([body[:-cut]])
            assert complete and sent.replace(b"\r\n", b"\n").replace(b"\r", b"\n").endswith(b"}\n\n"), (newline, cut)


def test_a_later_choice_still_streaming_is_not_an_end() -> None:
    two = _event("a", "stop") + b'data: {"choices": [{"index": 1, "delta": {"content": "b"}, "finish_reason": null}]}\n\n'
    assert not stream_is_complete(two)


@settings(max_examples=150, deadline=None)  # a busy machine must not fail it on time
@given(st.lists(st.integers(min_value=1, max_value=len(FULL) - 1), max_size=12, unique=True),
       st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_split_relays_the_stream_unchanged(cuts: list[int], newline: bytes) -> None:
    stream = FULL.replace(b"\n", newline)
    bounds = [0, *sorted(cuts), len(stream)]
    reads = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    assert _relay(reads) == (stream, True)


ENDS_WITH_FINISH = _event("Hel") + b": keep-alive\n\n" + _event("lo") + _event("", "stop")


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=len(ENDS_WITH_FINISH) - 3), st.integers(min_value=1, max_value=40))
def test_a_cut_stream_is_never_complete_and_sends_only_whole_events(cut_at: int, read_size: int) -> None:
    cut = ENDS_WITH_FINISH[:cut_at]  # anywhere before its only end marker's JSON is whole ("}" then "\n\n")
    sent, complete = _relay([cut[i:i + read_size] for i in range(0, len(cut), read_size)])
    assert not complete
    assert ENDS_WITH_FINISH.startswith(sent) and (not sent or sent.endswith(b"\n\n"))


def test_an_event_goes_out_as_soon_as_its_blank_line_is_in_even_byte_by_byte() -> None:
    for newline in (b"\n", b"\r\n", b"\r"):
        event = _event("a").replace(b"\n", newline)
        tail = StreamTail()
        sent = [tail.take(event[i:i + 1]) for i in range(len(event))]
        assert sent[-1] == event and not any(sent[:-1]), newline


def test_a_long_stream_keeps_only_its_tail() -> None:
    tail = StreamTail()
    for _ in range(5000):
        tail.take(_event("x" * 50))
    assert tail.end(_event("", "stop"))[1]
    assert sum(map(len, tail._pieces)) < 130 * 1024  # trimmed to 64 KiB whenever it passes 128 KiB


def test_ended_says_whether_what_went_through_ends_the_stream() -> None:
    tail = StreamTail()
    assert not tail.ended()
    tail.take(b'data: {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}\n\n')
    assert not tail.ended()
    tail.take(b"data: [DO")  # an unfinished event is held back: not out yet
    assert not tail.ended()
    tail.take(b"NE]\n\n")
    assert tail.ended()
    finish_only = StreamTail()
    finish_only.take(b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n: ping\n\n')
    assert finish_only.ended()
