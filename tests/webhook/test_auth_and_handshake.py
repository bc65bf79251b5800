"""Bearer tokens from the managed identity, and the CloudEvents abuse-protection handshake."""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from se_forwarder.sinks.base import Delivered, Park, Retry
from tests.support.receiver import Receiver, Reply
from tests.support.sinks import make_sink, record_events

TOKEN_PATH = "/metadata/identity/oauth2/token"
SCOPE = "api://se-receiver/.default"


@pytest.fixture
def identity(monkeypatch):
    """A managed-identity token endpoint on loopback, used by azure-identity's real client."""
    for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT", "MSI_SECRET",
                 "IMDS_ENDPOINT", "IDENTITY_SERVER_THUMBPRINT", "AZURE_CLIENT_ID"):
        monkeypatch.delenv(name, raising=False)
    with Receiver(path="/unused") as server:
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", f"http://127.0.0.1:{server.port}")
        yield server


def token_reply(token: str) -> Reply:
    body = {"access_token": token, "expires_in": "3600", "expires_on": str(int(time.time()) + 3600),
            "resource": "api://se-receiver", "token_type": "Bearer"}
    return Reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())


def test_entra_auth_sends_the_managed_identity_token_and_fetches_it_once(identity, receiver,
                                                                         state_dir):
    identity.route(TOKEN_PATH, token_reply("token-one"))
    sink = make_sink(url=receiver.url, auth="entra", scope=SCOPE, client_id="1111-2222")

    assert sink.deliver(record_events(state_dir, 3)).outcomes == [Delivered()] * 3

    assert [r.headers["authorization"] for r in receiver.posts()] == ["Bearer token-one"] * 3
    [token_request] = [r for r in identity.requests if r.path.startswith(TOKEN_PATH)]
    query = parse_qs(urlsplit(token_request.path).query)
    assert query["resource"] == ["api://se-receiver"]
    assert query["client_id"] == ["1111-2222"]
    assert token_request.headers["metadata"] == "true"


def test_no_token_means_retry_with_one_line_and_nothing_sent(identity, receiver, state_dir):
    refusal = b'{"error": "invalid_request", "error_description": "Identity not found"}'
    identity.route(TOKEN_PATH, Reply(400, {"Content-Type": "application/json"}, refusal))
    sink = make_sink(url=receiver.url, auth="entra", scope=SCOPE)

    [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.reason.startswith(f"cannot get an Entra token for {SCOPE} from the managed identity")
    assert "\n" not in outcome.reason
    assert receiver.posts() == []


def test_the_handshake_comes_once_before_the_first_delivery(state_dir):
    with Receiver(allow_origin="*") as receiver:
        sink = make_sink(url=receiver.url, handshake=True)

        sink.deliver(record_events(state_dir, 2, prefix="a"))
        sink.deliver(record_events(state_dir, 1, prefix="b"))

        methods = [r.method for r in receiver.requests]
        assert methods == ["OPTIONS", "POST", "POST", "POST"]
        assert receiver.requests[0].headers["webhook-request-origin"]
        assert receiver.errors == []


def test_a_refused_handshake_blocks_delivery_with_a_reason(state_dir):
    with Receiver(allow_origin="coordinator.example") as receiver:
        sink = make_sink(url=receiver.url, handshake=True)

        [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

        assert isinstance(outcome, Retry)
        assert outcome.reason.startswith(f"abuse-protection handshake with {receiver.url} refused: HTTP 403")
        assert receiver.posts() == []
        assert sink.check() == outcome.reason


def gaps(receiver: Receiver) -> list[float]:
    """Seconds between the POSTs the receiver read, one after the other."""
    times = [r.at for r in receiver.posts()]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_the_allowed_rate_of_the_handshake_spaces_the_requests(state_dir):
    with Receiver(allow_origin="*", allowed_rate="240") as receiver:  # 4 a second
        sink = make_sink(url=receiver.url, handshake=True)

        assert sink.deliver(record_events(state_dir, 4)).outcomes == [Delivered()] * 4

        assert min(gaps(receiver)) >= 60 / 240  # never closer at the receiver, whatever the load


def test_the_allowed_rate_counts_from_each_reply_so_a_slow_receiver_gets_its_spacing_too(state_dir):
    with Receiver(allow_origin="*", allowed_rate="240") as receiver:  # 4 a second
        receiver.script(*[Reply(200, delay=0.4)] * 3)  # each answered later than the rate's interval
        sink = make_sink(url=receiver.url, handshake=True)

        assert sink.deliver(record_events(state_dir, 3)).outcomes == [Delivered()] * 3

        assert min(gaps(receiver)) >= 0.4 + 60 / 240


def test_without_handshake_no_options_request_is_made(receiver, state_dir):
    make_sink(url=receiver.url).deliver(record_events(state_dir, 1))

    assert [r.method for r in receiver.requests] == ["POST"]


def test_a_410_to_the_handshake_parks_the_sink(state_dir):
    with Receiver() as receiver:
        receiver.route("/gone", Reply(410, body=b"hook deleted"))
        sink = make_sink(url=f"http://127.0.0.1:{receiver.port}/gone", handshake=True)

        [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

        assert isinstance(outcome, Park) and "410" in outcome.reason
        assert receiver.posts("/gone") == []


def test_an_absurdly_low_allowed_rate_spaces_requests_by_at_most_a_minute_without_raising(state_dir):
    with Receiver(allow_origin="*", allowed_rate="1e-300") as receiver:
        sink = make_sink(url=receiver.url, handshake=True)
        closer = threading.Timer(0.5, sink.close)
        closer.start()
        try:
            outcomes = sink.deliver(record_events(state_dir, 2)).outcomes
        finally:
            closer.join()

        assert outcomes == [Delivered(), Retry("sink is closing")]
        assert sink.min_interval == 60.0
