"""Weight files as other tools write them: PyTorch ``.bin`` (single and sharded, read without running
pickled code) and safetensors carrying tensors the model does not use."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from kvfence.engine.llm import LLM
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ModelLoadError
from tests.engine.tiny_models import build_tiny_model

GREEDY = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
PROMPTS = [[5, 17, 99, 3], list(range(40, 75))]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="module")
def reference(llama_dir: Path) -> list[list[int]]:
    return _generate(llama_dir)


def _generate(model_dir: Path) -> list[list[int]]:
    llm = LLM(model=str(model_dir), max_model_len=128, kv_cache_tokens=512, page_size=8, device="cpu")
    return [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]


def _without_safetensors(src: Path, dst: Path) -> dict[str, torch.Tensor]:
    shutil.copytree(src, dst)
    weights = load_file(str(dst / "model.safetensors"))
    (dst / "model.safetensors").unlink()
    return weights


def test_pytorch_bin_checkpoint_loads_the_same_weights(llama_dir: Path, reference: list[list[int]], tmp_path: Path) -> None:
    single = tmp_path / "bin"
    torch.save(_without_safetensors(llama_dir, single), single / "pytorch_model.bin")
    assert _generate(single) == reference

    sharded = tmp_path / "bin-sharded"
    weights = _without_safetensors(llama_dir, sharded)
    names = sorted(weights)
    shards = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
    for file, part in shards.items():
        torch.save({n: weights[n] for n in part}, sharded / file)
    index = {"weight_map": {n: file for file, part in shards.items() for n in part}}
    (sharded / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    assert _generate(sharded) == reference


class _Payload:
    """Unpickling this runs ``os.system``: what a hostile ``.bin`` would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_a_bin_with_pickled_code_is_refused_without_running_it(llama_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "hostile"
    weights: dict[str, object] = dict(_without_safetensors(llama_dir, d))
    marker = tmp_path / "pwned"
    weights["model.norm.weight"] = _Payload(marker)
    torch.save(weights, d / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match=r"pytorch_model\.bin.*weights_only"):
        LLM(model=str(d), max_model_len=128, kv_cache_tokens=512, device="cpu")
    assert not marker.exists()


def test_unused_tensors_in_the_checkpoint_are_ignored(llama_dir: Path, reference: list[list[int]], tmp_path: Path) -> None:
    """Older checkpoints carry ``rotary_emb.inv_freq`` buffers; others carry heads kvfence does not run."""
    d = tmp_path / "extra"
    weights = _without_safetensors(llama_dir, d)
    for layer in range(2):
        weights[f"model.layers.{layer}.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    weights["model.layers.7.mlp.down_proj.weight"] = torch.ones(2, 2)  # a layer past num_hidden_layers
    weights["value_head.weight"] = torch.ones(3)
    save_file(weights, str(d / "model.safetensors"))
    assert _generate(d) == reference


def test_no_weights_at_all_is_named(llama_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "empty"
    _without_safetensors(llama_dir, d)
    with pytest.raises(ModelLoadError, match=r"no model\.safetensors.*pytorch_model\.bin"):
        LLM(model=str(d), max_model_len=128, kv_cache_tokens=512, device="cpu")
