"""``pip install '.[gateway]'`` into a fresh venv, from the pip sources ``make`` installs from: the gateway
serves a request from a backend on 127.0.0.1 with ``examples/gateway-demo.yaml``, torch is not there, and
a command of another part names the extra it needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.gateway.conftest import FakeBackend
from tests.netutil import free_port

REPO = Path(__file__).resolve().parents[1]
# the demo policy's public tenant key (examples/gateway-demo.yaml says so)
DEMO_KEY = "kvf-gw-demo-acme-alice-NOT-SECRET"


@pytest.fixture(scope="module")
def gateway_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("install")
    source = root / "source"  # a copy, so the build leaves nothing in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", f"{source}[gateway]"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return venv


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def test_the_gateway_install_has_no_engine_stack(gateway_venv: Path) -> None:
    for module in ("torch", "transformers", "spacy", "presidio_analyzer", "scipy", "matplotlib", "llguidance"):
        proc = subprocess.run([str(gateway_venv / "bin/python"), "-c", f"import {module}"], capture_output=True,
                              text=True, env=_clean_env(), cwd=gateway_venv, timeout=60)
        assert proc.returncode != 0, f"{module} is installed by kvfence[gateway]"
        assert "ModuleNotFoundError" in proc.stderr


def test_the_install_ships_every_file_the_package_reads(gateway_venv: Path) -> None:
    # name lists, kernels' sources, templates: a data file the package-data patterns miss is absent from
    # an installed kvfence (an editable checkout still has it, so only an install shows the gap)
    src = REPO / "src" / "kvfence"
    wanted = {p.relative_to(src).as_posix() for p in src.rglob("*")
              if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}
    site = next((gateway_venv / "lib").glob("python3*/site-packages/kvfence"))
    installed = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    assert wanted and not wanted - installed, sorted(wanted - installed)


def test_serve_without_the_engine_extra_names_it(gateway_venv: Path) -> None:
    proc = subprocess.run([str(gateway_venv / "bin/kvfence"), "serve", "--no-auth"], capture_output=True,
                          text=True, env=_clean_env(), cwd=gateway_venv, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: `kvfence serve` needs the engine extra: pip install 'kvfence[engine]' "
                                   "(missing module: torch)")


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    backend = FakeBackend("plain-backend", "--max-model-len", "4096")
    yield backend
    backend.stop()


def test_the_gateway_install_serves_a_request(gateway_venv: Path, backend: FakeBackend, tmp_path: Path) -> None:
    policy = yaml.safe_load((REPO / "examples/gateway-demo.yaml").read_text())
    policy["gateway"]["audit_log"] = f"sqlite:///{tmp_path}/audit.db"
    (upstream,) = policy["backends"]
    upstream["url"] = backend.url
    upstream["model_map"] = {"demo": "plain-model"}
    upstream["capacity"] = "auto"  # the test backend advertises its context in /v1/models, not /v1/capacity
    config = tmp_path / "gateway-demo.yaml"
    config.write_text(yaml.safe_dump(policy, sort_keys=False))
    port = free_port()
    log = tmp_path / "gateway.log"
    env = _clean_env(KVFENCE_GATEWAY_SECRET="0" * 64, DEMO_ACME_UPSTREAM_KEY="upstream-acme",
                     DEMO_GLOBEX_UPSTREAM_KEY="upstream-globex")
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(gateway_venv / "bin/kvfence"), "gateway", "--config", str(config),
                                 "--host", "127.0.0.1", "--port", str(port)], env=env, cwd=tmp_path,
                                stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        backend.control(echo=True)
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                           headers={"Authorization": f"Bearer {DEMO_KEY}"},
                           json={"model": "demo", "max_tokens": 8,
                                 "messages": [{"role": "user", "content": "Mail jane.doe@example.com the summary"}]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "Mail jane.doe@example.com the summary"
        (sent,) = backend.received()
        upstream_text = str(sent["body"]["messages"])
        assert "jane.doe@example.com" not in upstream_text  # pseudonymised on the way out, restored on the way back
        assert sent["headers"]["authorization"] == "Bearer upstream-acme"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
