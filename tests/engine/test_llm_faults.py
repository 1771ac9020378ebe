"""The offline API under fault isolation: a prompt the forward pass fails on alone raises, naming it,
instead of the engine's misleading "stopped with requests unfinished"; the LLM stays usable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams

GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
POISON = [251, 252, 253, 254]


def _contains(tokens: list[int], needle: list[int]) -> bool:
    return any(tokens[i:i + len(needle)] == needle for i in range(len(tokens) - len(needle) + 1))


def test_a_prompt_that_fails_alone_raises_and_names_its_index(default_model_dir: Path) -> None:
    llm = LLM(model=str(default_model_dir), kv_cache_tokens=1024, max_model_len="auto", device="cpu")
    clean = llm.generate([[5, 6, 7, 8], [9, 10, 11]], GREEDY)
    real = llm.engine.runner.execute

    def execute(items: list[Any], *args: Any) -> Any:
        if any(_contains(list(it.seq.token_ids), POISON) for it in items):
            raise RuntimeError("test: kernel failure on this input")
        return real(items, *args)

    llm.engine.runner.execute = execute  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="failed on prompt 1: test: kernel failure") as info:
        llm.generate([[5, 6, 7, 8], [1, 2, *POISON], [9, 10, 11]], GREEDY)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert not llm.engine.has_unfinished_requests()  # the call's other prompts were aborted, not left running
    assert llm.engine.pool_is_zero()
    again = llm.generate([[5, 6, 7, 8], [9, 10, 11]], GREEDY)  # the LLM is still usable, outputs unchanged
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in clean]
