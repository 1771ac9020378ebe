"""The package's top level: the engine's API where vLLM users look for it, and ``import kvfence`` stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_import_kvfence_loads_no_torch() -> None:
    assert _run("import sys, kvfence; print('torch' in sys.modules)") == "False"


def test_tenant_identity_from_the_top_level_loads_no_torch() -> None:
    out = _run("import sys; from kvfence import TenantIdentity, CacheScope; print(TenantIdentity.__module__, 'torch' in sys.modules)")
    assert out == "kvfence.scope False"


def test_llm_and_sampling_params_at_the_top_level_are_the_engines() -> None:
    import kvfence
    from kvfence.engine.llm import LLM
    from kvfence.engine.sampling.sampling_params import SamplingParams

    assert kvfence.LLM is LLM
    assert kvfence.SamplingParams is SamplingParams


def test_an_unknown_name_is_an_attribute_error() -> None:
    import kvfence

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = kvfence.Nope  # type: ignore[attr-defined]
