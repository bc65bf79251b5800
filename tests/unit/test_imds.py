"""The IMDS client against real HTTP on loopback: timeouts, ETags, proxies."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from se_forwarder.imds import ENABLED_FOR, ImdsClient, ImdsError, already_enabled
from se_forwarder.simulator import SimulatorServer

DOC_A = json.dumps({"DocumentIncarnation": 1, "Events": []}).encode()


class Scripted:
    """A loopback HTTP server answering each GET with the next scripted reply; logs the headers."""

    def __init__(self, replies: list) -> None:
        self.replies = list(replies)
        self.seen: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.seen.append(dict(self.headers))
                reply = owner.replies.pop(0)
                status, body, headers = reply(dict(self.headers)) if callable(reply) else reply
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted() -> Iterator:
    servers: list[Scripted] = []

    def make(replies: list) -> Scripted:
        servers.append(Scripted(replies))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_first_scheduledevents_call_gets_the_long_timeout_even_after_compute_answered():
    with SimulatorServer(first_call_delay=1.0) as sim:
        client = ImdsClient(sim.url, timeout=0.3, first_call_timeout=10.0)
        try:
            client.get_compute()  # answers at once: it does not switch scheduled events on
            assert client.get_document().incarnation >= 0
        finally:
            client.close()


def test_304_after_a_malformed_reply_never_stands_for_the_older_document(scripted):
    def third(headers: dict[str, str]) -> tuple:
        if headers.get("If-None-Match") == '"b"':
            return 304, b"", {"ETag": '"b"'}
        return 200, b"not json", {"ETag": '"b"'}

    server = scripted([(200, DOC_A, {"ETag": '"a"'}), (200, b"not json", {"ETag": '"b"'}), third])
    client = ImdsClient(server.url, timeout=5.0, first_call_timeout=5.0)
    try:
        assert client.get_document().incarnation == 1
        with pytest.raises(ImdsError) as first:
            client.get_document()
        assert first.value.reason == "malformed"
        with pytest.raises(ImdsError) as again:
            client.get_document()
        assert again.value.reason == "malformed"
    finally:
        client.close()


def test_retry_after_with_a_non_ascii_digit_is_ignored_not_a_crash():
    from se_forwarder.imds import parse_retry_after

    assert parse_retry_after("²") is None
    assert parse_retry_after("7") == 7.0


def test_every_client_of_one_imds_shares_one_rate_limiter():
    a, b = ImdsClient("http://127.0.0.1:9/vm/x"), ImdsClient("http://127.0.0.1:9/vm/x/")
    other = ImdsClient("http://127.0.0.1:9/vm/y")
    try:
        assert a.limiter is b.limiter and a.limiter is not other.limiter
    finally:
        for client in (a, b, other):
            client.close()


def test_the_rate_limiter_lets_at_most_its_limit_start_in_any_window():
    import time

    from se_forwarder.imds import RateLimiter

    limiter = RateLimiter(limit=3, per=0.3)
    began = time.monotonic()
    starts = []
    for _ in range(7):
        limiter.acquire()
        starts.append(time.monotonic() - began)
    for i in range(len(starts) - 3):
        assert starts[i + 3] - starts[i] >= 0.3 - 1e-3, starts


def test_a_429_waits_its_retry_after_up_to_5_s_else_about_a_second():
    from se_forwarder.imds import throttled_delay

    assert throttled_delay(2.0) == 2.0
    assert throttled_delay(60.0) == 5.0
    assert throttled_delay(0.0) == 0.0
    assert all(1.0 <= throttled_delay(None) <= 1.25 for _ in range(100))


def test_a_client_told_imds_is_enabled_times_out_its_first_request_like_any_other():
    with SimulatorServer(first_call_delay=3.0) as sim:
        client = ImdsClient(sim.url, timeout=0.3, first_call_timeout=10.0)
        client.assume_enabled()
        try:
            with pytest.raises(ImdsError) as waited:
                client.get_document()
            assert waited.value.reason == "timeout"
        finally:
            client.close()


@pytest.mark.parametrize(("ago", "enabled"), [
    (None, False), (5.0, True), (0.0, True), (ENABLED_FOR - 60, True), (ENABLED_FOR, False),
    (-60.0, False),  # ahead of the clock: it was set back, the poll proves nothing
])
def test_imds_counts_as_enabled_after_a_successful_poll_within_24_hours(ago, enabled):
    now = 1_800_000_000.0
    assert already_enabled(None if ago is None else now - ago, now) is enabled
