"""The test receiver itself (tests/support/receiver.py): what it does with a request cut short."""

from __future__ import annotations

import socket

from tests.support.receiver import Receiver
from tests.support.waiting import wait_for


def test_a_request_cut_before_its_body_ended_is_dropped_not_counted_as_an_invalid_body(receiver: Receiver):
    with socket.create_connection(("127.0.0.1", receiver.port), timeout=5) as client:
        client.sendall(b"POST /hook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 40\r\n\r\n{\"routing_key\":")
        client.shutdown(socket.SHUT_WR)  # the sender dies mid-body
        assert client.recv(1024) == b""  # closed unanswered
    wait_for(lambda: receiver.cut == 1, 5, "the cut request to be counted")
    assert (receiver.requests, receiver.errors) == ([], [])
