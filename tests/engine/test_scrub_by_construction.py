"""I2 by construction: no forward pass, and no handoff read or write, touches the pool while a released
page still holds its old bytes, whatever the loop around the runner remembers to do.

Each test releases a request the way a loop that forgot to scrub would (through the scheduler alone)
and poisons its pages; the probe on the model's forward pass then looks at every free page."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import IsolationViolation
from kvfence.scope import TenantIdentity
from tests.engine.pool_probe import PoolProbe

PROMPT = "Quarterly revenue for ACME Corp is 12.3M; the merger closes on the 14th of May."
PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
ORG_A = TenantIdentity("org-a", "ws-1", "key-1")
ORG_B = TenantIdentity("org-b", "ws-1", "key-1")


def _engine(model_dir: Path) -> tuple[LLM, LLMEngine, PoolProbe]:
    llm = LLM(model=str(model_dir), page_size=16, device="cpu", kv_cache_tokens=1024, max_model_len="auto")
    engine = llm.engine
    return llm, engine, PoolProbe(engine.runner, engine.block_manager, engine.free_pages)


def _start(llm: LLM, engine: LLMEngine, rid: str, tenant: TenantIdentity) -> None:
    engine.add_request(rid, engine.tokenizer.encode(PROMPT + " " + rid), PARAMS, llm.scope_key(tenant))
    while not (seq := engine.scheduler.get(rid)) or seq.num_completion_tokens == 0:
        engine.step()


def test_a_loop_of_its_own_that_never_scrubs_cannot_run_a_forward_over_released_pages(default_model_dir: Path) -> None:
    """A fourth loop, written without a single scrub call: schedule, then the runner's forward."""
    llm, engine, probe = _engine(default_model_dir)
    _start(llm, engine, "a", ORG_A)
    stranded = probe.strand(engine.scheduler, "a")
    engine.add_request("b", engine.tokenizer.encode("another tenant's prompt"), PARAMS, llm.scope_key(ORG_B))
    forwards = probe.forwards
    batch = engine.scheduler.schedule()
    engine.runner.execute(batch.items)
    assert probe.forwards == forwards + 1
    assert set(stranded) <= probe.checked  # the poisoned pages were free when the forward started ...
    assert probe.stale == []  # ... and zero: the runner scrubbed them itself, first
    assert engine.pool_is_zero()


def test_the_engine_step_never_runs_a_forward_over_released_pages(default_model_dir: Path) -> None:
    llm, engine, probe = _engine(default_model_dir)
    _start(llm, engine, "a", ORG_A)
    _start(llm, engine, "b", ORG_A)
    stranded = probe.strand(engine.scheduler, "a")
    engine._requests.pop("a")
    forwards = probe.forwards
    while engine.has_unfinished_requests():
        engine.step()
    assert probe.forwards > forwards and set(stranded) <= probe.checked
    assert probe.stale == [] and engine.pool_is_zero()


def test_a_failed_scrub_stops_the_forward_pass(default_model_dir: Path) -> None:
    """When the zero-fill fails, the forward does not run and the pages stay owed (retried next time)."""
    llm, engine, probe = _engine(default_model_dir)
    _start(llm, engine, "a", ORG_A)
    stranded = probe.strand(engine.scheduler, "a")
    real_scrub = engine.runner.scrub

    def broken(pages: list[int]) -> None:
        raise RuntimeError("test: the memset failed")

    engine.runner.scrub = broken  # type: ignore[method-assign]
    batch = engine.scheduler.schedule()
    forwards = probe.forwards
    with pytest.raises(RuntimeError, match="memset"):
        engine.runner.execute(batch.items)
    assert probe.forwards == forwards  # nothing read the pool
    assert set(stranded) <= set(engine.block_manager.pending_scrub())  # still owed
    engine.runner.scrub = real_scrub  # type: ignore[method-assign]
    engine.runner.execute(batch.items)
    assert probe.stale == [] and engine.block_manager.num_pending_scrub == 0


def test_a_zero_fill_that_leaves_pages_owed_is_an_isolation_violation(default_model_dir: Path) -> None:
    llm, engine, probe = _engine(default_model_dir)
    _start(llm, engine, "a", ORG_A)
    probe.strand(engine.scheduler, "a")
    ledger = engine.block_manager.ledger
    real_flush = ledger.flush_scrub
    ledger.flush_scrub = lambda zero_fill: None  # type: ignore[method-assign]  # takes nothing, zeroes nothing
    forwards = probe.forwards
    with pytest.raises(IsolationViolation, match="owed their zero-fill"):
        engine.runner.execute(engine.scheduler.schedule().items)
    assert probe.forwards == forwards
    ledger.flush_scrub = real_flush  # type: ignore[method-assign]


def test_handoff_reads_and_writes_zero_fill_released_pages_first(default_model_dir: Path) -> None:
    """The pool's page bytes for the handoff go through the runner, which scrubs before it reads or writes."""
    llm, engine, probe = _engine(default_model_dir)
    _start(llm, engine, "a", ORG_A)
    stranded = probe.strand(engine.scheduler, "a")
    runner = engine.runner
    payloads = runner.read_pages(stranded)
    assert all(not any(bytes(p)) for p in payloads)  # read back as zeros, never the poison
    assert engine.pool_is_zero(stranded) and engine.block_manager.num_pending_scrub == 0
    _start(llm, engine, "b", ORG_A)
    stranded = probe.strand(engine.scheduler, "b")
    target = stranded[0]
    runner.write_page(target, bytes(runner.page_nbytes))  # into one page; every owed page is zeroed first
    assert engine.pool_is_zero(stranded) and engine.block_manager.num_pending_scrub == 0
    with pytest.raises(ValueError, match="bytes"):
        runner.write_page(target, b"short")
    assert runner.kv_layout()["page_size"] == 16 and runner.page_nbytes == len(payloads[0])
    assert torch.equal(runner.kv_pool[:, :, target], torch.zeros_like(runner.kv_pool[:, :, target]))
