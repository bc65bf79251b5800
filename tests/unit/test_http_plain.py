"""The IMDS client's plain HTTP/1.1 exchange (``http_plain.PlainOrigin``), against real sockets on
loopback: a scripted server for each framing case, the standard library's server for keep-alive.
What it shares with ``http_client.Origin`` is tested with it in test_http_client.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from se_forwarder.http_client import HttpError
from se_forwarder.http_plain import PlainOrigin
from tests.support.trickling import TricklingServer


class Scripted:
    """Answers the requests of each connection with the next replies of ``script`` (one list of
    raw replies per connection, in order), then closes that connection; keeps what it received."""

    def __init__(self, *script: list[bytes]) -> None:
        self.script = list(script)
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        for replies in self.script:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                for reply in replies:
                    request = b""
                    while b"\r\n\r\n" not in request:
                        data = conn.recv(65536)
                        if not data:
                            break
                        request += data
                    self.requests.append(request)
                    conn.sendall(reply)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def scripted() -> Iterator:
    made: list[tuple[Scripted, PlainOrigin]] = []

    def make(*script: list[bytes]) -> tuple[Scripted, PlainOrigin]:
        server = Scripted(*script)
        made.append((server, PlainOrigin(server.url + "/vm/a", connect_timeout=2,
                                         headers={"Metadata": "true"})))
        return made[-1]

    yield make
    for server, origin in made:
        origin.close()
        server.close()


def get(origin: PlainOrigin, max_bytes: int = 1000, method: str = "GET"):
    return origin.request(method, "/metadata/x?api-version=1", timeout=2, max_bytes=max_bytes)


def failure(origin: PlainOrigin, **kwargs) -> HttpError:
    with pytest.raises(HttpError) as caught:
        get(origin, **kwargs)
    return caught.value


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nETag: \"v1\"\r\n\r\n{}"


def test_the_request_carries_the_prefix_the_host_and_the_fixed_headers(scripted):
    server, origin = scripted([OK])
    reply = get(origin)
    assert (reply.status, reply.body, reply.header("etag"), reply.header("ETag")) == (
        200, b"{}", '"v1"', '"v1"')
    head = server.requests[0].decode()
    assert head.startswith("GET /vm/a/metadata/x?api-version=1 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.url.rsplit(':', 1)[1]}\r\n" in head
    assert "Metadata: true\r\n" in head


def test_many_requests_share_one_connection_and_extra_headers_go_with_theirs_only(serve):
    server = serve()
    origin = PlainOrigin(server.url + "/vm/a", connect_timeout=2)
    try:
        for i in range(20):
            headers = {"If-None-Match": '"x"'} if i % 2 else None
            assert origin.request("GET", "/x?y=1", timeout=2, max_bytes=100,
                                  headers=headers).body == b"{}"
    finally:
        origin.close()
    assert server.connections == 1
    assert server.paths == ["/vm/a/x?y=1"] * 20


def test_a_post_sends_its_body_with_its_length(scripted):
    server, origin = scripted([OK])
    origin.request("POST", "/p", timeout=2, max_bytes=100, body=b'{"a":1}',
                   headers={"Content-Type": "application/json"})
    assert b"Content-Length: 7\r\n" in server.requests[0]
    assert b"Content-Type: application/json\r\n" in server.requests[0]


def test_a_chunked_body_is_joined_and_its_trailers_skipped(scripted):
    _, origin = scripted([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"4;ext=1\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\n", OK])
    assert get(origin).body == b'{"a":1}'
    assert get(origin).body == b"{}", "the connection serves the next request"


def test_interim_replies_are_skipped(scripted):
    _, origin = scripted([b"HTTP/1.1 100 Continue\r\n\r\n" + OK])
    assert get(origin).status == 200


def test_a_body_read_to_the_close_ends_the_connection(scripted):
    server, origin = scripted([b"HTTP/1.0 200 OK\r\n\r\n{\"until\":\"close\"}"], [OK])
    assert get(origin).body == b'{"until":"close"}'
    assert get(origin).status == 200
    assert len(server.requests) == 2


def test_no_body_is_read_for_304_and_204(scripted):
    _, origin = scripted([b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
                          b"HTTP/1.1 204 No Content\r\n\r\n", OK])
    assert (get(origin).status, get(origin).status, get(origin).body) == (304, 204, b"{}")


def test_connection_close_is_honoured(scripted):
    server, origin = scripted([b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"],
                              [OK])
    get(origin)
    get(origin)
    assert len(server.requests) == 2


@pytest.mark.parametrize("reply, problem", [
    (b"garbage\r\n\r\n", "status line"),
    (b"HTTP/2 200 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header field"),
    (b"HTTP/1.1 200 OK\r\nX: a\x01b\r\nContent-Length: 0\r\n\r\n", "header field"),
    (b"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 0\r\n\r\n", "header field"),
    (b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", "header field"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n{}", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n{}", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n", "chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{}\r\n0\r\n\r\n", "longer than"),
], ids=["not-http", "http2", "four-digits", "no-colon", "control-char", "bare-cr", "obs-fold",
        "two-lengths", "negative-length", "0x-chunk", "chunk-overrun"])
def test_a_malformed_reply_is_a_connection_error_naming_the_problem(scripted, reply, problem):
    _, origin = scripted([reply])
    error = failure(origin)
    assert error.kind == "connection"
    assert "malformed reply" in str(error) and problem in str(error)


def test_a_head_without_end_is_refused_once_too_long(scripted):
    _, origin = scripted([b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"x" * 70_000])
    assert "too long" in str(failure(origin))


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000,
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b"x" * 1024 + b"\r\n0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 5000,
], ids=["length", "chunked", "until-close"])
def test_a_body_larger_than_allowed_is_too_large(scripted, reply):
    _, origin = scripted([reply])
    assert failure(origin, max_bytes=1000).kind == "too-large"


def test_a_fresh_connection_closed_without_a_reply_is_a_connection_error(scripted):
    _, origin = scripted([b""])
    assert failure(origin).kind == "connection"


@pytest.mark.parametrize("head_too", [False, True], ids=["body-trickles", "head-trickles"])
def test_a_trickling_reply_fails_at_the_timeout_for_the_whole_request(head_too):
    server = TricklingServer(gap=0.1, length=1000, head_too=head_too)
    origin = PlainOrigin(f"http://127.0.0.1:{server.port}", connect_timeout=1.0)
    try:
        with pytest.raises(HttpError) as caught:
            origin.request("GET", "/", timeout=1.0, max_bytes=4096)
    finally:
        origin.close()
        server.close()
    assert caught.value.kind == "timeout"
    # a timeout per read alone would have waited out the whole trickle (1,000 bytes x 0.1 s)
    assert server.bytes_sent < server.length // 2


@pytest.mark.parametrize("headers", [{"X-A": "1\r\nX-B: 2"}, {"X\nY": "1"}, {"": "1"}])
def test_a_header_that_would_split_the_request_is_refused_before_sending(scripted, headers):
    server, origin = scripted([OK])
    with pytest.raises(ValueError):
        origin.request("GET", "/", timeout=1, max_bytes=100, headers=headers)
    assert server.requests == []


def test_only_plain_http_urls_are_taken():
    with pytest.raises(ValueError):
        PlainOrigin("https://127.0.0.1:1", connect_timeout=1)
