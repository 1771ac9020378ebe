"""An endpoint that is not an OpenAI-compatible API gets an error that says so, not a guess."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.audit.conftest import AuditRun, check_result

PAGE = b"<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome</h1>" + b"x" * 2000 + b"</body></html>"


class _WebServer(BaseHTTPRequestHandler):
    """A plain web server: an HTML page for every GET, a 405 HTML page for every POST."""

    def _page(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def do_GET(self) -> None:
        self._page(404 if self.path.startswith("/v1/") else 200)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._page(405)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WebServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_no_model_list_names_the_status_not_a_missing_model(run_audit: AuditRun, web_server: str) -> None:
    result, data = run_audit("admission", web_server)
    assert result.exit_code == 2
    reason = check_result(data, "admission")["summary"]
    assert "/v1/models answered HTTP 404" in reason and "OpenAI-compatible" in reason, reason


def test_an_html_error_page_is_named_by_its_title_not_dumped(run_audit: AuditRun, web_server: str) -> None:
    result, data = run_audit("admission", web_server, "--model", "m", "--max-context", "4096")
    assert result.exit_code == 2
    reason = check_result(data, "admission")["summary"]
    assert "HTTP 405" in reason and "an HTML page, not an API error (Welcome to nginx!)" in reason, reason
    assert "<html" not in reason and "xxxx" not in reason
