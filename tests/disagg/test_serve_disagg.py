"""The OpenAI server app on a DisaggregatedEngine: real HTTP on 127.0.0.1, the official openai client.

This is what `kvfence serve` does with the factory swapped; no server file is changed for it.
The prefill worker's capacity is advertised inflated (the incident's configuration fault), so a
too-long prompt passes the front and is rejected on the prefill side: the client must get an
error status, never a 200 with an answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.disagg.wire import Message, MessageKind, encode
from tests.disagg.conftest import WORKER_MAX_MODEL_LEN
from tests.disagg.helpers import serve_disaggregated
from tests.disagg.mitm import Mitm


def _inflate(msg: Message, frames: list[bytes]) -> list[list[bytes]]:
    if msg.kind is MessageKind.WELCOME:
        return [encode(MessageKind.WELCOME, {**msg.fields, "max_model_len": 1024, "num_pages": 64})]
    return [frames]


@pytest.fixture
def served(model_dir: Path, mitm: Mitm) -> Iterator[tuple[str, list[DisaggregatedEngine]]]:
    mitm.to_decode = _inflate
    with serve_disaggregated(model_dir, mitm.address, kv_cache_tokens=1024, max_model_len=1024) as served:
        yield served


def test_openai_client_gets_answers_and_errors_never_a_placeholder_answer(
    served: tuple[str, list[DisaggregatedEngine]],
) -> None:
    base, engines = served
    with openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        _exercise(client, engines)


def _exercise(client: openai.OpenAI, engines: list[DisaggregatedEngine]) -> None:
    model = client.models.list().data[0].id

    ok = client.completions.create(model=model, prompt="hello there, " * 4, max_tokens=6, temperature=0)
    assert ok.choices[0].finish_reason == "length" and ok.usage is not None and ok.usage.completion_tokens == 6

    chunks = list(client.completions.create(model=model, prompt="stream me", max_tokens=5, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) != ""

    # longer than the prefill pool, accepted by the inflated front: the prefill side REJECTs it
    long_prompt = "z" * (WORKER_MAX_MODEL_LEN + 50)
    with pytest.raises(openai.APIStatusError) as info:
        client.completions.create(model=model, prompt=long_prompt, max_tokens=8, temperature=0)
    assert info.value.status_code == 400
    assert "rejected" in str(info.value)
    texts: list[str] = []
    with pytest.raises(openai.APIError, match="no answer"):  # streamed: an error event, no text ever
        for chunk in client.completions.create(model=model, prompt=long_prompt, max_tokens=8, temperature=0, stream=True):
            texts.extend(c.text for c in chunk.choices)
    assert "".join(texts) == ""

    # longer than even the advertised context: a 400 before anything is sent anywhere (I3)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt="y" * 1100, max_tokens=8)

    stats = engines[0].stats()
    assert stats.num_prefill_rejections == 2 and stats.num_handoffs_verified == 2
    assert stats.handoff_failures == {"rejected": 2}
