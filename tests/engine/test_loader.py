"""Loading local checkpoints: sharded safetensors, clear errors naming what is wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from kvfence.engine.config import ModelConfig
from kvfence.engine.llm import LLM
from kvfence.engine.runner.loader import load_model
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ModelLoadError
from tests.engine.tiny_models import build_tiny_model

GREEDY = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("llama"), "llama")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_sharded_checkpoint_loads_the_same_weights(llama_dir: Path, tmp_path: Path) -> None:
    import transformers

    sharded = tmp_path / "sharded"
    model = transformers.AutoModelForCausalLM.from_pretrained(llama_dir)
    model.save_pretrained(sharded, max_shard_size="40KB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(llama_dir / name, sharded / name)
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(list(sharded.glob("*.safetensors"))) > 2
    single = LLM(model=str(llama_dir), kv_cache_tokens=2048, device="cpu").generate("abc", GREEDY)
    multi = LLM(model=str(sharded), kv_cache_tokens=2048, device="cpu").generate("abc", GREEDY)
    assert single[0].token_ids == multi[0].token_ids


def test_bf16_weights_load(llama_dir: Path) -> None:
    # on the CPU bfloat16 is a storage format (kernels.half_weights): the matrix weights in 2 bytes,
    # norms in float32, computed in float32
    cfg = ModelConfig.from_dir(llama_dir)
    model = load_model(llama_dir, cfg, max_len=64, dtype=torch.bfloat16, device=torch.device("cpu"))
    full = load_model(llama_dir, cfg, max_len=64, dtype=torch.float32, device=torch.device("cpu"))
    reference = dict(full.named_parameters())
    for name, param in model.named_parameters():
        matrix = name.endswith(("_proj.weight", "embed_tokens.weight", "lm_head.weight"))
        assert param.dtype == (torch.bfloat16 if matrix else torch.float32), name
        assert torch.equal(param, reference[name].to(param.dtype)), name


def test_missing_directory_and_files(llama_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        LLM(model=str(tmp_path / "nope"), device="cpu")
    no_weights = _copy(llama_dir, tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"no model\.safetensors"):
        LLM(model=str(no_weights), kv_cache_tokens=2048, device="cpu")
    no_tokenizer = _copy(llama_dir, tmp_path / "no-tokenizer")
    (no_tokenizer / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match=r"no tokenizer\.json"):
        LLM(model=str(no_tokenizer), kv_cache_tokens=2048, device="cpu")
    no_config = _copy(llama_dir, tmp_path / "no-config")
    (no_config / "config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        LLM(model=str(no_config), device="cpu")


def test_missing_shard_is_named(llama_dir: Path, tmp_path: Path) -> None:
    d = _copy(llama_dir, tmp_path / "index")
    weights = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    names = sorted(weights)
    save_file({n: weights[n] for n in names[:5]}, str(d / "part-1.safetensors"))
    index = {"weight_map": {n: "part-1.safetensors" if i < 5 else "part-2.safetensors" for i, n in enumerate(names)}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match=r"lists part-2\.safetensors, which is missing"):
        LLM(model=str(d), kv_cache_tokens=2048, device="cpu")


def test_missing_and_misshapen_tensors_are_named(llama_dir: Path, tmp_path: Path) -> None:
    d = _copy(llama_dir, tmp_path / "missing")
    weights = load_file(str(d / "model.safetensors"))
    del weights["model.layers.1.self_attn.k_proj.weight"]
    save_file(weights, str(d / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"missing tensors: model\.layers\.1\.self_attn\.k_proj\.weight"):
        LLM(model=str(d), kv_cache_tokens=2048, device="cpu")
    weights["model.layers.1.self_attn.k_proj.weight"] = torch.zeros(3, 3)
    save_file(weights, str(d / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"k_proj\.weight has shape \(3, 3\)"):
        LLM(model=str(d), kv_cache_tokens=2048, device="cpu")


def test_unsupported_architecture_is_named(llama_dir: Path, tmp_path: Path) -> None:
    d = _copy(llama_dir, tmp_path / "gpt2")
    config = json.loads((d / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="unsupported architecture GPT2LMHeadModel"):
        LLM(model=str(d), device="cpu")
    config["architectures"] = ["LlamaForCausalLM"]
    config["rope_parameters"] = {"rope_type": "mrope", "rope_theta": 10000.0}  # Qwen2-VL's multimodal RoPE
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="mrope"):
        LLM(model=str(d), device="cpu")


def test_hub_id_is_found_in_the_local_hub_cache(llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`LLM(model="org/name")` serves a model fetched earlier into the Hugging Face cache; never downloads."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelLoadError, match=r"does not download models.*huggingface-cli download acme/tiny-llama"):
        LLM(model="acme/tiny-llama", kv_cache_tokens=2048, device="cpu")
    repo = tmp_path / "hub" / "models--acme--tiny-llama"
    _copy(llama_dir, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    llm = LLM(model="acme/tiny-llama", kv_cache_tokens=2048, device="cpu")
    assert llm.engine.model_name == "acme/tiny-llama"
    local = LLM(model=str(llama_dir), kv_cache_tokens=2048, device="cpu")
    assert llm.generate("abc", GREEDY)[0].token_ids == local.generate("abc", GREEDY)[0].token_ids


def test_quantized_checkpoint_is_named_not_misread(llama_dir: Path, tmp_path: Path) -> None:
    d = _copy(llama_dir, tmp_path / "awq")
    config = json.loads((d / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"quantized checkpoints are not supported \(quantization_config: awq\)"):
        LLM(model=str(d), kv_cache_tokens=2048, device="cpu")
