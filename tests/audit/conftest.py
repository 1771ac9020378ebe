"""Fixtures of the auditor's tests: a CLI runner that calls ``kvfence audit`` in-process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kvfence.cli import cli

KEYS = ["--key", "key-a", "--same-org-key", "key-a2", "--key-b", "key-b"]

AuditRun = Callable[..., tuple[Result, dict[str, Any]]]


@pytest.fixture
def run_audit(tmp_path: Path) -> AuditRun:
    """``run_audit(check, url, *args)`` -> (click result, parsed ``results.json``)."""

    def run(check: str, url: str, *args: str, keys: list[str] | None = None, out: Path | None = None) -> Any:
        out = out or tmp_path / "report"
        result = CliRunner().invoke(
            cli, ["audit", check, "--endpoint", url, *(KEYS if keys is None else keys), "--out", str(out), *args]
        )
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        results_file = out / "results.json"
        data = json.loads(results_file.read_text()) if results_file.exists() else {}
        return result, data

    return run


def check_result(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in data["checks"] if c["check"] == name)
