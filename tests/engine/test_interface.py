"""The typed engine-server seam: one output type, and every engine the server can be given has each member."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from kvfence.disagg.engine import DisaggregatedEngine, DisaggRequestOutput
from kvfence.engine.core.llm_engine import LLMEngine
from kvfence.engine.interface import Engine, RequestOutput

MEMBERS = sorted(name for name in vars(Engine) if not name.startswith("_"))


def test_the_seam_names_what_the_server_reads() -> None:
    assert {"add_request", "step", "abort_request", "take_failed_requests", "stats", "tokenizer", "capacity",
            "model_dir", "serves_prompt_only", "max_num_seqs"} <= set(MEMBERS)


@pytest.mark.parametrize("engine", [LLMEngine, DisaggregatedEngine])
@pytest.mark.parametrize("member", MEMBERS)
def test_every_engine_has_every_member(engine: type, member: str) -> None:
    """Statically checked by mypy (server/runner.py returns both as ``Engine``); here for attributes set in __init__."""
    source = inspect.getsource(engine)
    assert hasattr(engine, member) or f"self.{member} =" in source or f"self.{member}, " in source, member


def test_one_output_type_carries_the_error_fields() -> None:
    assert DisaggRequestOutput is RequestOutput
    names = {f.name: f.default for f in dataclasses.fields(RequestOutput)}
    assert names["error"] is None and names["error_reason"] is None and names["prompt_logprobs"] is None
