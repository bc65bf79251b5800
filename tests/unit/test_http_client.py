"""The keep-alive client the poller uses, against real HTTP on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from se_forwarder.http_client import HttpError, Origin
from tests.support.trickling import TricklingServer


class Server:
    """HTTP/1.1 on loopback; counts the connections it accepted. ``close_after_each`` answers
    every request with keep-alive and then closes the connection anyway (a server's idle timeout)."""

    def __init__(self, body: bytes = b"{}", close_after_each: bool = False) -> None:
        self.connections = 0
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                owner.connections += 1
                super().setup()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                if close_after_each:
                    self.wfile.flush()
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator:
    servers: list[Server] = []

    def make(**kwargs: object) -> Server:
        servers.append(Server(**kwargs))  # type: ignore[arg-type]
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_many_requests_share_one_connection(serve):
    server = serve()
    origin = Origin(server.url + "/vm/a", connect_timeout=2)
    try:
        for _ in range(20):
            assert origin.request("GET", "/x?y=1", timeout=2, max_bytes=100).body == b"{}"
    finally:
        origin.close()
    assert server.connections == 1
    assert server.paths == ["/vm/a/x?y=1"] * 20


def test_a_connection_the_server_closed_while_idle_is_replaced_without_an_error(serve):
    server = serve(close_after_each=True)
    origin = Origin(server.url, connect_timeout=2)
    try:
        for _ in range(5):
            assert origin.request("GET", "/", timeout=2, max_bytes=100).status == 200
    finally:
        origin.close()
    assert server.connections == 5


def test_a_reply_larger_than_allowed_is_refused_unread(serve):
    server = serve(body=b"x" * 5000)
    origin = Origin(server.url, connect_timeout=2)
    try:
        with pytest.raises(HttpError) as caught:
            origin.request("GET", "/", timeout=2, max_bytes=1000)
    finally:
        origin.close()
    assert caught.value.kind == "too-large"


def _one_shot(reply: bytes) -> tuple[str, socket.socket]:
    """A listener that answers one connection with ``reply`` and closes it."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(reply)
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", listener


def test_a_reply_cut_short_is_a_connection_error_not_a_short_body():
    url, listener = _one_shot(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"half\":")
    origin = Origin(url, connect_timeout=2)
    try:
        with pytest.raises(HttpError) as caught:
            origin.request("GET", "/", timeout=2, max_bytes=1000)
    finally:
        origin.close()
        listener.close()
    assert caught.value.kind == "connection"


def test_a_server_that_never_answers_is_a_timeout():
    listener = socket.create_server(("127.0.0.1", 0))
    origin = Origin(f"http://127.0.0.1:{listener.getsockname()[1]}", connect_timeout=2)
    try:
        with pytest.raises(HttpError) as caught:
            origin.request("GET", "/", timeout=0.3, max_bytes=1000)
    finally:
        origin.close()
        listener.close()
    assert caught.value.kind == "timeout"


def test_nothing_listening_is_a_connection_error():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    origin = Origin(f"http://127.0.0.1:{port}", connect_timeout=2)
    with pytest.raises(HttpError) as caught:
        origin.request("GET", "/", timeout=1, max_bytes=1000)
    assert caught.value.kind == "connection"


@pytest.mark.parametrize("head_too", [False, True], ids=["body-trickles", "head-trickles"])
def test_a_trickling_reply_fails_at_the_total_deadline_not_per_read(head_too):
    server = TricklingServer(gap=0.1, length=1000, head_too=head_too)
    origin = Origin(f"http://127.0.0.1:{server.port}", connect_timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(HttpError) as caught:
            origin.request("GET", "/", timeout=0.5, total=1.0, max_bytes=4096)
    finally:
        origin.close()
        server.close()
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 1.0 + 0.5  # per read alone: 1,000 bytes x 0.1 s


def test_a_truncated_reply_keeps_what_arrived_by_the_deadline():
    server = TricklingServer(gap=0.1, length=1000)
    origin = Origin(f"http://127.0.0.1:{server.port}", connect_timeout=1.0)
    try:
        reply = origin.request("POST", "/", body=b"{}", timeout=0.5, total=1.0, max_bytes=4096,
                               truncate=True)
    finally:
        origin.close()
        server.close()
    assert reply.status == 200
    assert 0 < len(reply.body) < 1000
