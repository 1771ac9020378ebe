"""The compiled-grammar cache must not cross cache scopes (I6: no timing signal across scopes).

A JSON schema of 30 fields with 20 enum values each compiles in about 8 ms with the built-in model
and comes from the cache in about 0.03 ms. With one process-wide cache, a tenant that sends a
guess of another organisation's schema (its field names, its customers in an enum) learns from
the latency whether that organisation used it. The oracle here is exact rather than timed: it
counts compilations. On the old code bob's request with acme's schema compiled nothing (a hit on
acme's entry) and the first test failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kvfence.engine.structured import compiler
from kvfence.scope import CacheScope
from tests.server.conftest import RunningServer, serve


@pytest.fixture(scope="module")
def org_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serve(tmp_path_factory.mktemp("grammar-org")) as running:
        yield running


@pytest.fixture(scope="module")
def request_scoped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serve(tmp_path_factory.mktemp("grammar-request"), cache_scope=CacheScope.REQUEST) as running:
        yield running


class _CompileCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = compiler._compile

        def counting(*args: Any) -> Any:
            self.count += 1
            return real(*args)

        monkeypatch.setattr(compiler, "_compile", counting)

    def delta(self, run: Any) -> int:
        before = self.count
        run()
        return self.count - before


def _schema(tag: str) -> dict[str, Any]:
    fields = {f"{tag}_field_{i}": {"type": "string", "enum": [f"{tag}-customer-{j}" for j in range(5)]}
              for i in range(6)}
    return {"type": "object", "properties": fields, "required": sorted(fields)}


def _constrained(server: RunningServer, who: str, schema: dict[str, Any], **extra: Any) -> Any:
    def run() -> None:
        r = httpx.post(server.base_url + "/v1/completions", headers=server.headers(who), timeout=60,
                       json={"prompt": "record:", "max_tokens": 3, "structured_outputs": {"json": schema}, **extra})
        assert r.status_code == 200, r.text
    return run


def test_another_organization_never_reuses_a_compiled_grammar(org_server: RunningServer,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = _CompileCounter(monkeypatch)
    secret_schema = _schema("acme-private")
    assert compiles.delta(_constrained(org_server, "alice", secret_schema)) == 1
    assert compiles.delta(_constrained(org_server, "alice", secret_schema)) == 0  # her scope's cache works
    assert compiles.delta(_constrained(org_server, "alice2", secret_schema)) == 0  # same org: same scope
    assert compiles.delta(_constrained(org_server, "bob", secret_schema)) == 1, \
        "globex got acme's compiled grammar from the cache (a latency signal across organizations)"
    assert compiles.delta(_constrained(org_server, "carol", secret_schema)) == 1


def test_a_cache_salt_splits_the_grammar_cache_too(org_server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = _CompileCounter(monkeypatch)
    schema = _schema("salted")
    assert compiles.delta(_constrained(org_server, "alice", schema, cache_salt="team-a")) == 1
    assert compiles.delta(_constrained(org_server, "alice", schema, cache_salt="team-b")) == 1
    assert compiles.delta(_constrained(org_server, "alice", schema, cache_salt="team-a")) == 0


def test_request_scope_caches_no_grammar(request_scoped: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = _CompileCounter(monkeypatch)
    schema = _schema("per-request")
    assert compiles.delta(_constrained(request_scoped, "alice", schema)) == 1
    assert compiles.delta(_constrained(request_scoped, "alice", schema)) == 1
