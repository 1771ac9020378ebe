"""A checkpoint's generation_config.json sampling values are the defaults of requests that omit them."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from kvfence.errors import ConfigError
from kvfence.server.config import ServerConfig
from tests.engine.tiny_models import build_tiny_model
from tests.server.conftest import engine_factory, serve


def _text(base: str, key: str, **fields: object) -> str:
    body = {"prompt": "tenant", "max_tokens": 16, "ignore_eos": True, **fields}
    r = httpx.post(base + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["text"])


def test_greedy_generation_config_makes_unset_temperature_greedy(tmp_path: Path) -> None:
    model = build_tiny_model(tmp_path / "model")
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": 260, "temperature": 0.0}))
    factory = engine_factory(model=str(model), max_model_len=256, kv_cache_tokens=1024)
    with serve(tmp_path / "srv", factory=factory) as server:
        key = server.keys["alice"]
        greedy = _text(server.base_url, key, temperature=0)
        assert _text(server.base_url, key, seed=1) == _text(server.base_url, key, seed=2) == greedy
        sampled = {_text(server.base_url, key, seed=s, temperature=1.0) for s in range(4)}
        assert len(sampled) > 1  # the request's own temperature still wins


def test_generation_config_option_is_checked() -> None:
    assert ServerConfig(generation_config="vllm").generation_config == "vllm"
    with pytest.raises(ConfigError, match="--generation-config"):
        ServerConfig(generation_config="hf")


def test_vllm_mode_ignores_the_models_defaults(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from kvfence.server.app import _sampling_defaults

    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.9}))
    engine = SimpleNamespace(model_dir=tmp_path)
    assert _sampling_defaults(engine, ServerConfig()) == {"temperature": 0.6, "top_p": 0.9}
    assert _sampling_defaults(engine, ServerConfig(generation_config="vllm")) == {}


def test_a_directory_gives_its_own_defaults_also_to_the_built_in_model(tmp_path: Path) -> None:
    """``--generation-config DIR`` (as vLLM's): that directory's file, whatever the model ships."""
    from types import SimpleNamespace

    from kvfence.server.app import _sampling_defaults

    model, other = tmp_path / "model", tmp_path / "other"
    model.mkdir()
    other.mkdir()
    (model / "generation_config.json").write_text(json.dumps({"temperature": 0.6}))
    (other / "generation_config.json").write_text(json.dumps({"temperature": 0.2, "top_k": 5}))
    config = ServerConfig(generation_config=str(other))
    assert _sampling_defaults(SimpleNamespace(model_dir=model), config) == {"temperature": 0.2, "top_k": 5}
    with pytest.raises(ConfigError, match=r"directory holding a generation_config\.json"):
        ServerConfig(generation_config=str(tmp_path / "missing"))
