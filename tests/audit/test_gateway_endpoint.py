"""`audit engine` against a gateway: the proxy is named, and the engine behind it is not guessed.

A gateway (kvfence's own, LiteLLM) answers /v1/models and /metrics for itself; scoring its name
against the advisory list would pass whatever vulnerable engine it fronts.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.audit.conftest import AuditRun, check_result

MODELS = json.dumps({"object": "list", "data": [{"id": "general", "object": "model",
                                                 "owned_by": "kvfence-gateway"}]}).encode()
METRICS = b"# TYPE kvfence_gateway_backend_up gauge\nkvfence_gateway_backend_up{backend=\"a\"} 1.0\n"


class _GatewayLike(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = {"/v1/models": MODELS, "/metrics": METRICS}.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json" if self.path == "/v1/models" else "text/plain")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gateway_like() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GatewayLike)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_engine_behind_a_gateway_is_inconclusive_not_pass(run_audit: AuditRun, gateway_like: str) -> None:
    result, data = run_audit("engine", gateway_like)
    engine = check_result(data, "engine")
    assert engine["verdict"] == "inconclusive" and result.exit_code == 2
    assert "gateway (kvfence-gateway)" in engine["summary"] and "audit its backends directly" in engine["summary"]
