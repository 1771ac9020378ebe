"""kvfence's HTTP/1.1 server (kvfence.http) on a real loopback socket, attacked with raw bytes: keep-alive, pipelining,
malformed requests, limits, Expect: 100-continue, chunked bodies, HTTP/1.0, HEAD/OPTIONS, timeouts,
lifespan and graceful shutdown."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from kvfence.http.server import LifespanFailed
from tests.http_server.harness import TestApp, running_server


def _openai_error(body: bytes) -> dict[str, object]:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        for i in range(3):
            client.send(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhey %d" % i)
            status, headers, body = client.read_response()
            assert (status, body) == (200, b"hey %d" % i)
            assert "connection" not in headers and "date" in headers
        client.close()


def test_pipelined_requests_are_answered_in_order() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        # the first is the slowest: a server that answered as each finished would answer it last
        client.send(b"GET /slow?300 HTTP/1.1\r\nhost: x\r\n\r\n"
                    b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc"
                    b"GET /slow?10 HTTP/1.1\r\nhost: x\r\n\r\n")
        assert client.read_response()[2] == b"slow 300"
        assert client.read_response()[2] == b"abc"
        assert client.read_response()[2] == b"slow 10"
        client.close()


@pytest.mark.parametrize("raw", [
    b"this is not http\r\n\r\n",
    b"GET / HTTP/9.9\r\nhost: x\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n",
    b"GET /hello HTTP/1.1\r\nbad header line\r\n\r\n",
    b"GET /\xff\xfe HTTP/1.1\r\nhost: x\r\n\r\n",
], ids=["garbage", "version", "length-and-chunked", "bad-length", "bad-header", "non-ascii-path"])
def test_malformed_requests_get_a_400_in_the_openai_shape_and_a_close(raw: bytes) -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(raw)
        status, headers, body = client.read_response()
        assert status == 400 and headers["connection"] == "close"
        assert _openai_error(body)["type"] == "invalid_request_error"
        assert client.is_closed()


def test_a_broken_chunked_body_is_a_400() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n")
        status, _, body = client.read_response()
        assert status == 400 and _openai_error(body)["code"] == "bad_request"
        assert client.is_closed()


def test_a_request_after_a_good_one_that_is_garbage_is_refused_after_the_good_answer() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"GET /slow?100 HTTP/1.1\r\nhost: x\r\n\r\nNOT HTTP AT ALL\r\n\r\n")
        assert client.read_response()[:1] == (200,)
        assert client.read_response()[0] == 400
        assert client.is_closed()


def test_header_limits_are_431() -> None:
    with running_server(TestApp(), max_head_bytes=4096, max_headers=20) as srv:
        client = srv.client()
        client.send(b"GET /hello HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 5000 + b"\r\n\r\n")
        status, _, body = client.read_response()
        assert status == 431 and _openai_error(body)["code"] == "request_header_fields_too_large"
        assert client.is_closed()
        client = srv.client()
        client.send(b"GET /hello HTTP/1.1\r\n" + b"".join(b"x-h%d: v\r\n" % i for i in range(30)) + b"\r\n")
        assert client.read_response()[0] == 431
        # a head that never ends is refused once it is over the limit, not buffered for ever
        client = srv.client()
        try:
            client.send(b"GET /hello HTTP/1.1\r\n")
            for _ in range(100):
                client.send(b"x-more: " + b"b" * 1000 + b"\r\n")
        except OSError:
            pass  # the server closed on us mid-send: also a refusal
        else:
            assert client.read_response()[0] == 431


def test_expect_100_continue_is_sent_when_the_app_reads_the_body() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n")
        assert client.read_head()[0] == 100
        client.send(b"body")
        assert client.read_response()[:3:2] == (200, b"body")


def test_expect_100_continue_refused_unread_closes_the_connection() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"POST /reject HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\nexpect: 100-continue\r\n\r\n")
        status, headers, _ = client.read_response()
        assert status == 413 and headers["connection"] == "close"  # no 100 first: the body was never asked for
        assert client.is_closed()


def test_chunked_request_body_arrives_whole() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                    b"5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n")
        assert client.read_response()[2] == b"hello world"


def test_a_large_body_arrives_whole_in_pieces() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: over the server's read-pause mark many times
    with running_server(TestApp()) as srv:
        client = srv.client(timeout=20)
        client.send(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(payload) + payload)
        assert client.read_response()[2] == payload


def test_streamed_answer_is_chunked_for_http11_and_close_delimited_for_http10() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        status, headers, body = client.read_response()
        assert headers["transfer-encoding"] == "chunked" and body == b"one,two,three"
        client = srv.client()
        client.send(b"GET /stream HTTP/1.0\r\n\r\n")
        status, headers, body = client.read_response()
        assert status == 200 and "transfer-encoding" not in headers and headers["connection"] == "close"
        assert body == b"one,two,three"


def test_http10_closes_unless_it_asks_for_keep_alive() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"GET /hello HTTP/1.0\r\n\r\n")
        assert client.read_response()[2] == b"/hello"
        assert client.is_closed()
        client = srv.client()
        client.send(b"GET /hello HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
        status, headers, _ = client.read_response()
        assert status == 200 and headers["connection"].lower() == "keep-alive"
        client.send(b"GET /hello HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
        assert client.read_response()[0] == 200


def test_connection_close_is_honoured() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\nGET /hello HTTP/1.1\r\n\r\n")
        status, headers, _ = client.read_response()
        assert status == 200 and headers["connection"] == "close"
        assert client.is_closed()
        assert client.buffer == b""  # the request after it was not answered


def test_head_gets_headers_without_a_body_and_the_connection_stays_usable() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        status, headers, _ = client.read_response(head_request=True)
        assert status == 200 and headers["content-length"] == "6"
        client.send(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        assert client.read_response()[2] == b"/hello"  # no stray body bytes before it


def test_options_asterisk_reaches_the_app() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"OPTIONS * HTTP/1.1\r\nhost: x\r\n\r\n")
        status, _, body = client.read_response()
        assert (status, body) == (404, b"*")


def test_the_app_sees_the_client_address() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"GET /client HTTP/1.1\r\nhost: x\r\n\r\n")
        host, port = client.read_response()[2].decode().split(":")
        assert (host, int(port)) == client.sock.getsockname()


def test_an_app_failure_is_a_500_in_the_openai_shape() -> None:
    with running_server(TestApp()) as srv:
        client = srv.client()
        client.send(b"GET /boom HTTP/1.1\r\nhost: x\r\n\r\n")
        status, _, body = client.read_response()
        assert status == 500 and _openai_error(body)["type"] == "server_error"


def test_idle_and_unfinished_connections_are_closed_after_their_timeouts() -> None:
    with running_server(TestApp(), idle_timeout_s=0.3, head_timeout_s=0.3) as srv:
        idle = srv.client()
        idle.send(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        idle.read_response()
        half = srv.client()
        half.send(b"GET /hello HTTP/1.1\r\nhost: x\r\n")  # a head that never ends (slowloris)
        assert idle.is_closed(wait=3) and half.is_closed(wait=3)


def test_a_client_hang_up_reaches_the_app_as_a_disconnect() -> None:
    app = TestApp()
    with running_server(app) as srv:
        client = srv.client()
        client.send(b"GET /forever?2 HTTP/1.1\r\nhost: x\r\n\r\n")
        client.read_head()
        client.close()
        deadline = time.monotonic() + 5
        while app.hangups < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert app.hangups == 2


def test_lifespan_runs_around_serving() -> None:
    app = TestApp()
    with running_server(app) as srv:
        assert app.events == ["startup"]
        client = srv.client()
        client.send(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        client.read_response()
    assert app.events == ["startup", "shutdown"]


def test_a_failed_startup_never_opens_the_port() -> None:
    with pytest.raises(LifespanFailed, match="no backend"), running_server(TestApp(fail_startup=True)):
        pass


def test_graceful_shutdown_finishes_answers_in_progress_and_stops_accepting() -> None:
    app = TestApp()
    with running_server(app) as srv:
        busy, idle = srv.client(), srv.client()
        idle.send(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        idle.read_response()
        busy.send(b"GET /slow?500 HTTP/1.1\r\nhost: x\r\n\r\n")
        time.sleep(0.1)
        srv.stop()
        assert idle.is_closed(wait=2)
        status, headers, body = busy.read_response()
        assert (status, body) == (200, b"slow 500") and headers["connection"] == "close"
        time.sleep(0.1)
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", srv.port), timeout=1) as late:
            late.recv(1)


def test_graceful_shutdown_gives_up_on_endless_answers_after_the_grace_period() -> None:
    app = TestApp()
    with running_server(app, graceful_timeout_s=0.3) as srv:
        client = srv.client()
        client.send(b"GET /forever HTTP/1.1\r\nhost: x\r\n\r\n")
        client.read_head()
        started = time.monotonic()
        done = threading.Thread(target=srv.stop)
        done.start()
        assert client.is_closed(wait=5)
        assert time.monotonic() - started < 4
    assert app.hangups == 1  # the app saw its stream end as a hang-up, and cleaned up
