"""The gateway's hook API is importable from ``kvfence.gateway``, lazily (``import kvfence.gateway`` alone
loads neither ``hooks.py`` nor anything it imports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kvfence.gateway
import kvfence.gateway.hooks

REPO = Path(__file__).resolve().parents[2]


def test_the_hook_api_is_exported_from_the_package() -> None:
    assert sorted(kvfence.gateway.__all__) == sorted(kvfence.gateway.hooks.__all__)
    for name in kvfence.gateway.hooks.__all__:
        assert getattr(kvfence.gateway, name) is getattr(kvfence.gateway.hooks, name)
    from kvfence.gateway import RequestContext, RequestHook, ResponseFilter  # the documented spelling

    assert {RequestContext.__name__, RequestHook.__name__, ResponseFilter.__name__} == {
        "RequestContext", "RequestHook", "ResponseFilter"}


def test_importing_the_package_loads_nothing_else() -> None:
    code = ("import sys, kvfence.gateway; "
            "print(sorted(m for m in sys.modules if m.startswith('kvfence.gateway.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO / "src")}, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
