"""``LLM(generation_config=...)``: the offline API samples with the model's generation_config.json
defaults when it is given no parameters, as ``kvfence serve`` and vLLM's ``LLM`` do; ``"vllm"``
turns them off and a directory path reads another file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ConfigError
from tests.engine.tiny_models import build_tiny_model

# Greedy by default (top_k 1), so the answer says which defaults were used.
GREEDY_DEFAULTS = {"bos_token_id": 256, "temperature": 0.7, "top_k": 1, "top_p": 0.9, "repetition_penalty": 1.0,
                   "min_p": 0.05, "max_new_tokens": 4}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_tiny_model(tmp_path_factory.mktemp("tiny"), "llama")
    (out / "generation_config.json").write_text(json.dumps(GREEDY_DEFAULTS))
    return out


def _llm(model_dir: Path, **kwargs: object) -> LLM:
    return LLM(str(model_dir), max_model_len=256, kv_cache_tokens=512, page_size=4, **kwargs)  # type: ignore[arg-type]


def test_generate_without_params_samples_with_the_models_defaults(model_dir: Path) -> None:
    llm = _llm(model_dir)
    defaults = llm.get_default_sampling_params()
    assert (defaults.temperature, defaults.top_k, defaults.top_p, defaults.min_p) == (0.7, 1, 0.9, 0.05)
    greedy = llm.generate("abc", SamplingParams(temperature=0.0))[0]
    for _ in range(3):  # top_k 1 from the file: the greedy answer every time, whatever the seed
        assert llm.generate("abc")[0].token_ids == greedy.token_ids
        assert llm.generate(["abc", "abc"], [None, SamplingParams(temperature=0.0)])[0].token_ids == greedy.token_ids


def test_explicit_params_are_used_as_given(model_dir: Path) -> None:
    llm = _llm(model_dir, seed=1)
    explicit = SamplingParams(max_tokens=16, seed=7)  # temperature 1, no top_k: sampled, not greedy
    assert llm.generate("abc", explicit)[0].token_ids != llm.generate("abc", SamplingParams(temperature=0.0))[0].token_ids


def test_vllm_turns_the_defaults_off_and_a_directory_is_read(model_dir: Path, tmp_path: Path) -> None:
    assert _llm(model_dir, generation_config="vllm").get_default_sampling_params() == SamplingParams()
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.3}))
    assert _llm(model_dir, generation_config=str(tmp_path)).get_default_sampling_params().temperature == 0.3
    with pytest.raises(ConfigError, match="generation_config"):
        LLM(str(model_dir), generation_config="hf")
