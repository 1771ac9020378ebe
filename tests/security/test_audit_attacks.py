"""`kvfence audit` must tell our server from a weakened one.

The same server, once as configured by default and once with the documented unsafe switch
``scrub=False`` (``kvfence serve --unsafe-no-scrub``: I2 off, the incident's precondition), which it
declares on ``/v1/capacity``. The engine check passes the first and reports a finding (exit code 1)
for the second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.audit.conftest import AuditRun, check_result
from tests.audit.conftest import run_audit as run_audit  # the fixture, re-exported here
from tests.server.conftest import engine_factory, serve


@pytest.mark.parametrize("scrub", [True, False])
def test_engine_check_fails_a_server_without_scrubbing(run_audit: AuditRun, tmp_path: Path, scrub: bool) -> None:
    with serve(tmp_path, factory=engine_factory(scrub=scrub)) as server:
        keys = ["--key", server.keys["alice"], "--key-b", server.keys["bob"]]
        result, data = run_audit("engine", server.base_url, keys=keys)
    engine = check_result(data, "engine")
    if scrub:
        assert result.exit_code == 0, result.output
        assert engine["verdict"] == "pass"
    else:
        assert result.exit_code == 1, result.output
        assert engine["verdict"] == "finding"
        assert "scrubbing off" in engine["summary"]
