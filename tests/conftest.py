"""Fixtures shared by every part: free loopback ports and real PostgreSQL / Redis servers.

The servers are started by the tests themselves on 127.0.0.1 from the Debian binaries that
``make test`` installs (scripts/system-deps.sh). Outside ``make test`` a missing binary skips the
test; under ``make test`` (KVFENCE_REQUIRE_SERVICES=1) it fails, so CI can never pass silently.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.netutil import free_port, wait_for_port


def _sync_client_classes() -> list[type[Any]]:
    """httpx's Client, and httpx2's (the fork the official openai and anthropic clients are built on)."""
    classes: list[type[Any]] = [httpx.Client]
    try:
        import httpx2
    except ImportError:
        return classes
    return [*classes, httpx2.Client]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Close the sync HTTP clients a test opened and left open (an ``openai.OpenAI(...)`` made inline).

    A client that raised inside ``pytest.raises`` sits in a reference cycle (exception, traceback,
    frame, client), so its sockets are not closed when the test ends but whenever the cyclic collector
    next runs: in some later test, which then fails on the ResourceWarning. Closing them here keeps
    each test's sockets inside that test. Only clients made on the test's own thread are tracked, so
    a server fixture's clients are left alone.
    """
    opened: weakref.WeakSet[Any] = weakref.WeakSet()
    test_thread = threading.get_ident()
    originals = {cls: cls.__init__ for cls in _sync_client_classes()}

    def tracking(original: Any) -> Any:
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if threading.get_ident() == test_thread:
                opened.add(self)
        return init

    for cls, original in originals.items():
        cls.__init__ = tracking(original)
    try:
        return (yield)
    finally:
        for cls, original in originals.items():
            cls.__init__ = original
        for client in list(opened):
            if not client.is_closed:
                client.close()


def _missing(what: str) -> None:
    if os.environ.get("KVFENCE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{what} is required under `make test` but is not installed")
    pytest.skip(f"{what} not installed (run `make system-deps`)")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a throw-away Redis server on loopback."""
    binary = shutil.which("redis-server")
    if binary is None:
        _missing("redis-server")
    assert binary is not None
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="kvfence-redis-") as tmp:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a throw-away PostgreSQL cluster on loopback (run as the `postgres` user when root)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        _missing("PostgreSQL (initdb)")
    bindir = Path(found[-1]).parent
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="kvfence-pg-")
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(tmp, user="postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    datadir = os.path.join(tmp, "data")
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", datadir, "-U", "kvfence", "--auth=trust", "-E", "UTF8"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [*prefix, str(bindir / "pg_ctl"), "-D", datadir, "-w", "-l", os.path.join(tmp, "log"),
         "-o", f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1", "start"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        yield f"postgresql://kvfence@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", datadir, "-m", "fast", "stop"],
                       check=False, stdout=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
