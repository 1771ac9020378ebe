"""A prefill worker replaced, at the same address, by one running other weights (I4).

The connect-time check refuses a fine-tuned prefill worker (``test_disagg_attacks.py``). But ZeroMQ
reconnects by itself: when the worker dies and another process binds the same address, the decode
side's socket talks to the new one without any new connect. The new worker holds the handoff key
(the same deployment), so its SUBMITs are accepted and its manifests are correctly signed; only its
weights differ, so its KV means something else. It must never be adopted, and no request may be
answered over its pages. This held: the WELCOME is re-checked (model identity) and refused, and every
manifest from the refused instance fails the sender check (``wrong_request``), pages zeroed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from kvfence.engine.sampling.sampling_params import SamplingParams
from tests.disagg.conftest import start_worker
from tests.disagg.helpers import assert_error_not_answer, drive, make_engine
from tests.security.test_disagg_attacks import _fine_tune

PROMPT = list(range(40, 80))
GREEDY = SamplingParams(max_tokens=6, temperature=0.0)


def test_a_worker_restarted_with_other_weights_is_never_adopted(default_model_dir: Path, tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    tuned = _fine_tune(default_model_dir, tmp_path / "tuned")
    worker = start_worker(default_model_dir, tmp_path / "first")
    engine = make_engine(default_model_dir, worker.address, timeout_s=5.0)
    try:
        engine.add_request("before", PROMPT, GREEDY, b"scope-a")
        assert drive(engine, ["before"])["before"][-1].finish_reason == "length"
        original = engine.sender_id
        worker.stop()
        caplog.set_level(logging.ERROR, logger="kvfence.disagg.engine")
        worker = start_worker(tuned, tmp_path / "second", listen=worker.address)
        deadline = time.monotonic() + 30
        while "refusing the restarted prefill worker" not in caplog.text and time.monotonic() < deadline:
            engine.step()
        assert "refusing the restarted prefill worker" in caplog.text and "another model" in caplog.text
        assert engine.sender_id == original  # not adopted

        engine.add_request("after", PROMPT, GREEDY, b"scope-a")
        out = assert_error_not_answer(drive(engine, ["after"], timeout_s=30)["after"], "wrong_request")
        assert "sender" in (out.error or "")
        assert engine.stats().num_used_pages == 0 and engine.pool_is_zero()
    finally:
        engine.close()
        worker.stop()
