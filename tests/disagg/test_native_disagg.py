"""Disaggregated prefill/decode on the native runtime: both processes without torch, same answers.

The decode side (``DisaggregatedEngine`` on ``runtime="native"``) spawns its prefill worker with
``--runtime native``; the handoff is verified as on torch (I4). Greedy answers and seeded samples
equal the colocated native engine's: a seeded request's NumPy generator state crosses the handoff,
so its second token onwards is drawn where the prefill side's first draw left the stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvfence.disagg.config import DisaggConfig
from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.engine.config import EngineConfig
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.core.outputs import RequestOutput
from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.disagg.helpers import drive

SCOPE = b"native-scope"


def _config(model_dir: Path) -> EngineConfig:
    return EngineConfig(model=str(model_dir), kv_cache_tokens=768, max_model_len=384, max_prefill_chunk=48,
                        num_threads=1, runtime="native")


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Iterator[DisaggregatedEngine]:
    eng = DisaggregatedEngine(DisaggConfig(engine=_config(model_dir), handoff_timeout_s=60))
    yield eng
    eng.close()


def _run(engine: object, batch: list[tuple[str, list[int], SamplingParams]]) -> dict[str, RequestOutput]:
    for rid, prompt, params in batch:
        engine.add_request(rid, prompt, params, SCOPE)  # type: ignore[attr-defined]
    return {rid: outs[-1] for rid, outs in drive(engine, [b[0] for b in batch]).items()}


def test_greedy_and_seeded_answers_equal_the_colocated_native_engine(engine: DisaggregatedEngine,
                                                                    model_dir: Path) -> None:
    assert engine.worker is not None and "runtime=native" in engine.worker.log_tail()
    greedy = SamplingParams(max_tokens=10, temperature=0.0)
    seeded = SamplingParams(max_tokens=10, temperature=1.0, seed=1234)
    batch = [
        ("short", [17, 18, 19], greedy),
        ("chunked", [(i * 13) % 250 + 3 for i in range(130)], greedy),
        ("seeded", list(range(40, 70)), seeded),
        ("seeded-again", list(range(40, 70)), seeded),
    ]
    got, want = _run(engine, batch), _run(LLMEngine(_config(model_dir)), batch)
    for rid, *_ in batch:
        assert got[rid].token_ids == want[rid].token_ids, rid
    assert got["seeded"].token_ids == got["seeded-again"].token_ids
    assert engine.num_handoffs_verified >= len(batch)
