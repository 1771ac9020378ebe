"""Extras: the gateway, the auditor's HTTP checks and ``kvfence --help`` import nothing of the engine, and a
command whose extra is missing says in one line which extra to install (exit 2, no traceback).

The missing modules are made missing for real in a child interpreter (a meta-path finder that refuses
them, as an environment without the extra would); tests/test_install.py does the same in a fresh venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "spacy", "presidio_analyzer", "scipy", "matplotlib", "llguidance",
         "safetensors", "zmq", "kvfence.engine", "kvfence.server", "kvfence.disagg")

_BLOCK = """
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""


def _child(code: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    prelude = f"BLOCKED = {blocked!r}\n" + _BLOCK
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def _loaded_after(code: str) -> list[str]:
    proc = _child(textwrap.dedent(code) + f"\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [["--help"], ["gateway", "--help"], ["audit", "--help"], ["audit", "admission", "--help"],
                                  ["gateway", "check", "examples/gateway.yaml"]])
def test_cli_parts_import_nothing_of_the_engine(argv: list[str]) -> None:
    loaded = _loaded_after(f"""
        from kvfence.cli import main
        try:
            main({argv!r})
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
    """)
    assert loaded == []


def test_gateway_app_and_audit_http_checks_import_nothing_of_the_engine(tmp_path: Path) -> None:
    loaded = _loaded_after(f"""
        import os
        os.environ.update(KVFENCE_GATEWAY_SECRET="x" * 64, DEMO_ACME_UPSTREAM_KEY="a", DEMO_GLOBEX_UPSTREAM_KEY="b")
        from pathlib import Path
        import yaml
        from kvfence.gateway.policy.loader import load_policy
        policy = yaml.safe_load(Path("examples/gateway-demo.yaml").read_text())
        policy["gateway"]["audit_log"] = "sqlite:///{tmp_path}/audit.db"
        Path("{tmp_path}/p.yaml").write_text(yaml.safe_dump(policy))
        from kvfence.gateway.app import build_app
        from kvfence.gateway.runtime import GatewayRuntime
        runtime = GatewayRuntime.create(load_policy(Path("{tmp_path}/p.yaml")), base_dir=Path("{tmp_path}"))
        app = build_app(runtime)
        from kvfence.gateway.protection.detect.detector import build_detector
        assert build_detector().scan("mail jane.doe@example.com") != []
        import kvfence.audit.admission, kvfence.audit.leak, kvfence.audit.fingerprint, kvfence.audit.report
    """)
    assert loaded == []


@pytest.mark.parametrize(("argv", "blocked", "extra"), [
    (["serve", "--no-auth"], ("torch",), "engine"),
    (["generate", "--prompt", "hi"], ("torch",), "engine"),
    (["disagg", "demo", "--prompt", "hi"], ("zmq",), "disagg"),
])
def test_a_command_without_its_extra_names_it_in_one_line(argv: list[str], blocked: tuple[str, ...],
                                                          extra: str) -> None:
    proc = _child(f"from kvfence.cli import main\nmain({argv!r})\n", blocked)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "RANDOM WEIGHTS" not in line]
    assert lines == [f"error: `kvfence {argv[0]}` needs the {extra} extra: pip install 'kvfence[{extra}]' "
                     f"(missing module: {blocked[0]})"], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_cache_sharing_without_the_audit_extra_says_so_before_sending_anything() -> None:
    proc = _child("""
        from kvfence.cli import main
        import sys
        sys.exit(main(["audit", "cache-sharing", "--endpoint", "http://127.0.0.1:9", "--key", "k", "--out", OUT]))
    """.replace("OUT", repr(str(REPO / ".pytest-extras-out"))), ("scipy",))
    try:
        assert "needs the audit extra: pip install 'kvfence[audit]' (missing module: scipy)" in proc.stdout, proc
        assert proc.returncode == 2
    finally:
        import shutil
        shutil.rmtree(REPO / ".pytest-extras-out", ignore_errors=True)


def test_a_missing_base_module_is_not_called_a_missing_extra() -> None:
    from kvfence.extras import missing_extra

    assert missing_extra(ModuleNotFoundError("x", name="httpx"), "`kvfence gateway`") is None
    found = missing_extra(ModuleNotFoundError("x", name="torch.nn"), "`kvfence serve`")
    assert found is not None and found.extra == "engine" and found.exit_code == 2
