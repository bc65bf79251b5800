"""A webhook request ends at its total timeout (connect_timeout + read_timeout), not per read: a
receiver that answers at once and then trickles its body a byte at a time, each byte well inside
read_timeout, cannot hold the sink longer. Against a real trickling HTTP server on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from se_forwarder.sinks.base import Delivered
from tests.support.sinks import make_sink, record_events
from tests.support.trickling import TricklingServer


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
