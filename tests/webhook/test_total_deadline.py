"""A webhook request ends at its total timeout (connect_timeout + read_timeout), not per read: a
receiver that answers at once and then trickles its body a byte at a time, each byte well inside
read_timeout, cannot hold the sink longer. Against a real trickling HTTP server on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from se_forwarder.sinks.base import Delivered

from .conftest import make_sink, record_events


class TricklingServer:
    """Answers every request with 200 and a body that arrives one byte per ``gap`` seconds."""

    def __init__(self, gap: float = 0.2, length: int = 10_000) -> None:
        self.gap, self.length = gap, length
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.closed = threading.Event()
        self.bytes_sent = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)  # the request (small)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: %d\r\n\r\n" % self.length)
                for _ in range(self.length):
                    if self.closed.wait(self.gap):
                        return
                    conn.sendall(b"x")
                    self.bytes_sent += 1
            except OSError:
                return  # the client hung up: what the deadline should make it do

    def close(self) -> None:
        self.closed.set()
        self.listener.close()


@pytest.fixture
def trickling() -> Iterator[TricklingServer]:
    server = TricklingServer()
    yield server
    server.close()


def test_a_trickling_body_ends_at_the_total_timeout_not_per_read(trickling, state_dir):
    (event,) = record_events(state_dir, 1)
    sink = make_sink(url=trickling.url, connect_timeout=0.5, read_timeout=1.0)
    started = time.monotonic()
    try:
        report = sink.deliver([event])
    finally:
        sink.close()
    took = time.monotonic() - started
    print(f"delivery against a trickling body returned after {took:.2f} s "
          f"(total timeout 1.5 s; {trickling.bytes_sent} bytes had arrived)")
    assert took < 1.5 + 1.0  # without a total deadline: 10,000 bytes x 0.2 s
    assert isinstance(report.outcomes[0], Delivered)  # the status line (200) is what counts


def test_the_check_request_is_bounded_by_the_same_deadline(trickling):
    sink = make_sink(url=trickling.url, connect_timeout=0.5, read_timeout=1.0)
    started = time.monotonic()
    try:
        assert sink.check() is None
    finally:
        sink.close()
    assert time.monotonic() - started < 2.5
