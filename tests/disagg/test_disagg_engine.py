"""DisaggregatedEngine with its own spawned prefill worker: same answers as the colocated engine."""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvfence.disagg.cli import disagg
from kvfence.disagg.config import DisaggConfig
from kvfence.disagg.engine import DisaggregatedEngine
from kvfence.disagg.protocol import HandoffError
from kvfence.engine.config import EngineConfig
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.core.outputs import RequestOutput
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import CapacityError, ConfigError, InvalidParameterError
from tests.disagg.helpers import assert_error_not_answer, drive

SCOPE = b"scope-one"
OTHER_SCOPE = b"scope-two"


def _config(model_dir: Path) -> EngineConfig:
    # small prefill chunks, so prompts are prefilled over several steps and pages get sealed mid-way
    return EngineConfig(model=str(model_dir), kv_cache_tokens=768, max_model_len=384,
                        max_prefill_chunk=48, num_threads=1)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Iterator[DisaggregatedEngine]:
    eng = DisaggregatedEngine(DisaggConfig(engine=_config(model_dir), handoff_timeout_s=60))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> LLMEngine:
    return LLMEngine(_config(model_dir))


def _run(engine: object, batch: list[tuple[str, list[int], SamplingParams, bytes]]) -> dict[str, list[RequestOutput]]:
    for rid, prompt, params, scope in batch:
        engine.add_request(rid, prompt, params, scope)  # type: ignore[attr-defined]
    return drive(engine, [b[0] for b in batch])


def _compare(engine: DisaggregatedEngine, reference: LLMEngine, batch: list[tuple[str, list[int], SamplingParams, bytes]]) -> None:
    got, want = _run(engine, batch), _run(reference, batch)
    for rid, *_ in batch:
        g, w = got[rid][-1], want[rid][-1]
        assert (g.token_ids, g.text, g.finish_reason) == (w.token_ids, w.text, w.finish_reason), rid
        # streamed deltas add up to the final text, first token included
        assert "".join(o.delta_text for o in got[rid]) == g.text
        assert [t for o in got[rid] for t in o.new_token_ids] == g.token_ids


def test_greedy_output_equals_colocated(engine: DisaggregatedEngine, reference: LLMEngine) -> None:
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    prompts = {
        "one-token": [17],
        "page-minus-one": list(range(20, 35)),
        "exact-page": list(range(20, 36)),
        "page-plus-one": list(range(20, 37)),
        "chunked": [(i * 13) % 250 + 3 for i in range(150)],
        "max-one": list(range(60, 90)),
    }
    batch = [(rid, p, SamplingParams(max_tokens=1) if rid == "max-one" else greedy, SCOPE) for rid, p in prompts.items()]
    _compare(engine, reference, batch)
    # same scope, shared prefix: the prefill side serves it from its prefix cache (shared pages)
    shared = prompts["chunked"][:128]
    _compare(engine, reference, [
        ("prefix-1", [*shared, 5, 6, 7], greedy, SCOPE),
        ("prefix-2", [*shared, 8, 9], greedy, SCOPE),
        ("other-scope", [*shared, 8, 9], greedy, OTHER_SCOPE),
    ])
    stats = engine.stats()
    assert stats.handoff_failures == {} and stats.num_handoffs_verified == 9
    assert engine.pool_is_zero()
    engine.block_manager.check_invariants()


def test_seeded_sampling_stop_and_logprobs_equal_colocated(engine: DisaggregatedEngine, reference: LLMEngine) -> None:
    prompt = [(i * 7) % 250 + 3 for i in range(40)]
    sampled = SamplingParams(max_tokens=16, temperature=0.9, top_k=40, top_p=0.95, seed=1234)
    _compare(engine, reference, [("seeded", prompt, sampled, SCOPE)])
    # a stop token id that the greedy continuation produces ends both the same way
    greedy_tokens = _run(reference, [("probe", prompt, SamplingParams(max_tokens=6, temperature=0.0), SCOPE)])
    stop_at = greedy_tokens["probe"][-1].token_ids[3]
    _compare(engine, reference, [("stopped", prompt, SamplingParams(max_tokens=6, temperature=0.0,
                                                                     stop_token_ids=[stop_at]), SCOPE)])
    got = _run(engine, [("lp", prompt, SamplingParams(max_tokens=4, temperature=0.0, logprobs=2), SCOPE)])["lp"][-1]
    want = _run(reference, [("lp", prompt, SamplingParams(max_tokens=4, temperature=0.0, logprobs=2), SCOPE)])["lp"][-1]
    assert got.logprobs is not None and want.logprobs is not None and len(got.logprobs) == 4
    for g, w in zip(got.logprobs, want.logprobs, strict=True):
        assert list(g) == list(w)
        assert all(math.isclose(g[t], w[t], abs_tol=1e-4) for t in g)


def test_interface_matches_llm_engine(engine: DisaggregatedEngine, reference: LLMEngine) -> None:
    for name in ("add_request", "step", "abort_request", "has_unfinished_requests", "stats", "pool_is_zero",
                 "tokenizer", "capacity", "model_name", "is_random_weights"):
        assert hasattr(engine, name), name
    assert engine.model_name == reference.model_name and engine.is_random_weights
    assert engine.capacity == reference.capacity
    with pytest.raises(Exception, match="vocabulary"):
        engine.add_request("bad", [10_000], SamplingParams(), SCOPE)
    # refused here, before the prefill worker sees them: nothing is allocated on either side
    with pytest.raises(InvalidParameterError, match="outside the vocabulary") as bias:
        engine.add_request("bad-bias", [1, 2, 3], SamplingParams(logit_bias={10_000: 5.0}), SCOPE)
    with pytest.raises(InvalidParameterError, match="disaggregated") as processors:
        engine.add_request("bad-lp", [1, 2, 3], SamplingParams(logits_processors=[lambda ids, row: row]), SCOPE)
    assert (bias.value.param, processors.value.param) == ("logit_bias", "logits_processors")
    with pytest.raises(InvalidParameterError, match="one choice"):
        engine.add_request("bad-n", [1, 2, 3], SamplingParams(n=2), SCOPE)
    engine.add_request("dupe", [1, 2, 3], SamplingParams(max_tokens=2), SCOPE)
    with pytest.raises(Exception, match="already in use"):
        engine.add_request("dupe", [1, 2, 3], SamplingParams(), SCOPE)
    engine.abort_request("dupe")
    engine.abort_request("never-existed")
    assert not engine.has_unfinished_requests()
    assert engine.pool_is_zero()


def test_cli_group_and_loopback_guard() -> None:
    runner = CliRunner()
    result = runner.invoke(disagg, ["--help"])
    assert result.exit_code == 0 and "prefill-worker" in result.output and "demo" in result.output
    result = runner.invoke(disagg, ["prefill-worker", "--listen", "tcp://0.0.0.0:5999"])
    assert isinstance(result.exception, ConfigError) and "loopback" in str(result.exception)


def test_worker_loss_fails_pending_requests_and_refuses_new_ones(engine: DisaggregatedEngine) -> None:
    """Runs last in this module: it kills the engine's own prefill worker."""
    worker = engine.worker
    assert worker is not None
    worker.proc.send_signal(signal.SIGSTOP)  # frozen: it cannot have answered anything
    engine.add_request("orphan", list(range(30)), SamplingParams(max_tokens=4), SCOPE)
    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait(10)
    assert_error_not_answer(drive(engine, ["orphan"])["orphan"], "worker_lost")
    with pytest.raises(HandoffError, match="exited"):
        engine.add_request("after", [1, 2], SamplingParams(), SCOPE)
    assert engine.pool_is_zero()


@pytest.mark.slow  # one more worker process start (~12 s); the connect-time check is in the fast suite
def test_spawned_worker_that_cannot_hold_its_context_refuses_to_start(model_dir: Path) -> None:
    """I3 at start-up, across processes: the prefill worker's own check fails, with its message."""
    decode = _config(model_dir)
    prefill = EngineConfig(model=str(model_dir), kv_cache_tokens=64, max_model_len=384, max_prefill_chunk=48, num_threads=1)
    with pytest.raises(CapacityError, match="KV pool holds only 64 tokens"):
        DisaggregatedEngine(DisaggConfig(engine=decode, prefill=prefill, connect_timeout_s=120))


@pytest.mark.slow  # one more worker process start (~12 s)
def test_spawned_worker_exits_when_its_engine_is_gone(model_dir: Path, tmp_path: Path) -> None:
    """A server killed by a signal skips atexit; its prefill worker must not linger (holding a pool)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "kvfence.disagg.cli", "prefill-worker", "--listen", f"ipc://{tmp_path}/w.sock",
         "--model", str(model_dir), "--kv-cache-tokens", "256", "--max-model-len", "256", "--num-threads", "1",
         "--parent-pid", "999999999"],  # not our parent: the worker must notice and stop by itself
        capture_output=True, timeout=120, check=False,
    )
    assert proc.returncode == 0
    assert b"is gone; the prefill worker stops" in proc.stderr
