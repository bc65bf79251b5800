"""The keep-alive clients, against real HTTP on loopback: ``Origin`` (``http.client``: webhooks,
pagers) and, for the contract both keep, ``PlainOrigin`` (IMDS)."""

from __future__ import annotations

import socket
import threading

import pytest

from se_forwarder.http_client import HttpError, Origin
from se_forwarder.http_plain import PlainOrigin
from tests.support.trickling import TricklingServer

BOTH = pytest.mark.parametrize("client", [Origin, PlainOrigin], ids=["http.client", "plain"])


@BOTH
def test_many_requests_share_one_connection(serve, client):
    server = serve()
    origin = client(server.url + "/vm/a", connect_timeout=2)
    try:
        for _ in range(20):
            assert origin.request("GET", "/x?y=1", timeout=2, max_bytes=100).body == b"{}"
    finally:
        origin.close()
    assert server.connections == 1
    assert server.paths == ["/vm/a/x?y=1"] * 20


@BOTH
def test_a_connection_the_server_closed_while_idle_is_replaced_without_an_error(serve, client):
    server = serve(close_after_each=True)
    origin = client(server.url, connect_timeout=2)
    try:
        for _ in range(5):
            assert origin.request("GET", "/", timeout=2, max_bytes=100).status == 200
    finally:
        origin.close()
    assert server.connections == 5


@BOTH
def test_a_reply_larger_than_allowed_is_refused_unread(serve, client):
    server = serve(body=b"x" * 5000)
    origin = client(server.url, connect_timeout=2)
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


@BOTH
def test_a_reply_cut_short_is_a_connection_error_not_a_short_body(client):
    url, listener = _one_shot(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"half\":")
    origin = client(url, connect_timeout=2)
    try:
        with pytest.raises(HttpError) as caught:
            origin.request("GET", "/", timeout=2, max_bytes=1000)
    finally:
        origin.close()
        listener.close()
    assert caught.value.kind == "connection"


@BOTH
def test_a_server_that_never_answers_is_a_timeout(client):
    listener = socket.create_server(("127.0.0.1", 0))
    origin = client(f"http://127.0.0.1:{listener.getsockname()[1]}", connect_timeout=2)
    try:
        with pytest.raises(HttpError) as caught:
            origin.request("GET", "/", timeout=0.3, max_bytes=1000)
    finally:
        origin.close()
        listener.close()
    assert caught.value.kind == "timeout"


@BOTH
def test_nothing_listening_is_a_connection_error_while_connecting(client):
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    origin = client(f"http://127.0.0.1:{port}", connect_timeout=2)
    with pytest.raises(HttpError) as caught:
        origin.request("GET", "/", timeout=1, max_bytes=1000)
    assert (caught.value.kind, caught.value.connecting) == ("connection", True)


@pytest.mark.parametrize("head_too", [False, True], ids=["body-trickles", "head-trickles"])
def test_a_trickling_reply_fails_at_the_total_deadline_not_per_read(head_too):
    server = TricklingServer(gap=0.1, length=1000, head_too=head_too)
    origin = Origin(f"http://127.0.0.1:{server.port}", connect_timeout=1.0)
    try:
        with pytest.raises(HttpError) as caught:
            origin.request("GET", "/", timeout=0.5, total=1.0, max_bytes=4096)
    finally:
        origin.close()
        server.close()
    assert caught.value.kind == "timeout"
    # a timeout per read alone would have waited out the whole trickle (1,000 bytes x 0.1 s)
    assert server.bytes_sent < server.length // 2


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
