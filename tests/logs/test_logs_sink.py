"""The logs-ingestion sink: the real ``azure-monitor-ingestion`` client and azure-identity credentials,
the real outbox and delivery worker; the Logs Ingestion API itself is a local HTTPS stand-in with a
test CA (``ingestion_endpoint.py``): no emulator of it exists, so it is the one mocked part here.
"""

from __future__ import annotations

import random
import string
from urllib.parse import parse_qs, urlsplit

from se_forwarder.outbox import Outbox
from se_forwarder.sinks.base import DeadLetter, Delivered, Retry
from tests.notify.events import agent_event, heartbeat, store
from tests.support.ingestion_endpoint import IngestionEndpoint
from tests.support.receiver import Reply
from tests.support.sinks import backlog, run_worker

from .conftest import RULE_ID, TOKEN, logs_sink, token_requests


def events(count: int, **data) -> list[dict]:
    return [agent_event("scheduled", f"6b0c1f52-aaaa-4bbb-8ccc-{i:012d}", **data) for i in range(count)]


def test_events_arrive_as_rows_of_the_stream_in_outbox_order(identity, endpoint, tls, state_dir) -> None:
    stored = store(state_dir, [*events(3), agent_event("completed"), heartbeat()], sink="logs")

    assert run_worker(logs_sink(endpoint, tls), state_dir, lambda box: backlog(box, "logs") == 0, 20)

    assert [row["CloudEventId"] for row in endpoint.rows()] == [e.ce_id for e in stored]
    [upload] = endpoint.uploads
    call = upload.request
    assert urlsplit(call.path).path == f"/dataCollectionRules/{RULE_ID}/streams/Custom-SeForwarderEvents"
    assert parse_qs(urlsplit(call.path).query)["api-version"] == ["2023-01-01"]
    assert call.headers["content-encoding"] == "gzip"
    assert call.headers["authorization"] == f"Bearer {TOKEN}"
    assert upload.compressed_bytes < upload.json_bytes


def test_the_token_comes_from_the_managed_identity_named_by_client_id(identity, endpoint, tls,
                                                                      state_dir) -> None:
    sink = logs_sink(endpoint, tls, client_id="11111111-2222-3333-4444-555555555555")

    assert sink.deliver(store(state_dir, events(2), sink="logs")).outcomes == [Delivered()] * 2
    assert sink.deliver(store(state_dir, [agent_event("started")], sink="logs")).outcomes == [Delivered()]

    [request] = token_requests(identity)  # cached for its lifetime
    query = parse_qs(urlsplit(request.path).query)
    assert query["resource"] == ["https://monitor.azure.com"]
    assert query["client_id"] == ["11111111-2222-3333-4444-555555555555"]
    assert request.headers["metadata"] == "true"


def test_default_azure_credential_is_used_when_configured(identity, endpoint, tls, state_dir) -> None:
    sink = logs_sink(endpoint, tls, credential="default", client_id="66666666-7777-8888-9999-000000000000")

    assert sink.deliver(store(state_dir, events(1), sink="logs")).outcomes == [Delivered()]

    [request] = token_requests(identity)
    assert parse_qs(urlsplit(request.path).query)["client_id"] == ["66666666-7777-8888-9999-000000000000"]


def test_429_is_retried_after_the_servers_retry_after(identity, endpoint, tls, state_dir) -> None:
    stored = store(state_dir, events(3), sink="logs")
    endpoint.script(Reply(429, {"Retry-After": "2", "Content-Type": "application/json"},
                          b'{"error":{"code":"TooManyRequests","message":"slow down"}}'))

    assert run_worker(logs_sink(endpoint, tls), state_dir, lambda box: backlog(box, "logs") == 0, 30)

    first, second = (u.request for u in endpoint.uploads[:2])
    assert (first.status, second.status) == (429, 204)
    assert second.at - first.at >= 1.9
    assert [row["CloudEventId"] for row in endpoint.rows()] == [e.ce_id for e in stored]


def test_503_is_a_retry_with_one_line_and_nothing_is_lost(identity, endpoint, tls, state_dir) -> None:
    stored = store(state_dir, events(2), sink="logs")
    endpoint.script(Reply(503, {"Retry-After": "7"}, b"busy"))
    sink = logs_sink(endpoint, tls)

    [outcome] = sink.deliver(stored).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.after == 7
    assert outcome.reason == f"HTTP 503 from https://127.0.0.1:{endpoint.port}: busy"
    assert run_worker(sink, state_dir, lambda box: backlog(box, "logs") == 0, 20)
    assert [row["CloudEventId"] for row in endpoint.rows()] == [e.ce_id for e in stored]


def test_400_dead_letters_only_the_refused_row_and_the_others_go_on(identity, endpoint, tls,
                                                                    state_dir) -> None:
    stored = store(state_dir, events(5), sink="logs")
    bad = stored[3]
    endpoint.refuse_rows(lambda row: row["CloudEventId"] == bad.ce_id)

    assert run_worker(logs_sink(endpoint, tls), state_dir, lambda box: backlog(box, "logs") == 0, 20)

    assert [row["CloudEventId"] for row in endpoint.rows()] == [e.ce_id for e in stored if e is not bad]
    with Outbox(state_dir) as box:
        [(seq, reason, _)] = box.dead_letters("logs")
    assert seq == bad.seq
    assert reason.startswith("HTTP 400 from ") and "InvalidDataFormat" in reason


def test_batches_are_cut_by_count(identity, endpoint, tls, state_dir) -> None:
    sink = logs_sink(endpoint, tls, batch_max_events=3)

    store(state_dir, events(7), sink="logs")
    assert run_worker(sink, state_dir, lambda box: backlog(box, "logs") == 0, 20)

    assert [len(u.rows) for u in endpoint.uploads] == [3, 3, 1]


def test_no_request_exceeds_one_megabyte(identity, endpoint, tls, state_dir) -> None:
    rng = random.Random(17)
    big = ["".join(rng.choices(string.ascii_letters, k=180_000)) for _ in range(12)]
    stored = store(state_dir, [agent_event("scheduled", f"e-{i:02d}", Description=text)
                               for i, text in enumerate(big)], sink="logs")

    assert run_worker(logs_sink(endpoint, tls), state_dir, lambda box: backlog(box, "logs") == 0, 30)

    assert len(endpoint.uploads) >= 3
    assert all(u.json_bytes <= 1_000_000 and u.request.status == 204 for u in endpoint.uploads)
    assert [row["CloudEventId"] for row in endpoint.rows()] == [e.ce_id for e in stored]


def test_403_is_retried_and_names_the_missing_role(identity, endpoint, tls, state_dir) -> None:
    endpoint.script(Reply(403, {"Content-Type": "application/json"},
                          b'{"error":{"code":"OperationFailed","message":"The authentication token provided '
                          b'does not have access to ingest data for the data collection rule"}}'))

    [outcome] = logs_sink(endpoint, tls).deliver(store(state_dir, events(1), sink="logs")).outcomes

    assert isinstance(outcome, Retry)
    assert "Monitoring Metrics Publisher" in outcome.reason and "30 minutes" in outcome.reason


def test_a_wrong_stream_is_retried_with_what_to_check(identity, endpoint, tls, state_dir) -> None:
    sink = logs_sink(endpoint, tls, stream="Custom-Typo")

    [outcome] = sink.deliver(store(state_dir, events(1), sink="logs")).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.reason.startswith("HTTP 404 from ")
    assert "check endpoint, rule_id, stream" in outcome.reason


def test_no_token_is_a_retry_naming_the_credential_and_nothing_is_sent(identity, endpoint, tls,
                                                                       state_dir) -> None:
    identity.route("/metadata/identity/oauth2/token",
                   Reply(400, {"Content-Type": "application/json"},
                         b'{"error":"invalid_request","error_description":"Identity not found"}'))

    [outcome] = logs_sink(endpoint, tls).deliver(store(state_dir, events(1), sink="logs")).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.reason.startswith("cannot get a token for https://monitor.azure.com/.default with "
                                     "credential = 'managed-identity': ")
    assert "\n" not in outcome.reason
    assert endpoint.uploads == []


def test_tls_verification_is_on_and_says_to_give_ca_file(identity, tls, state_dir) -> None:
    with IngestionEndpoint(tls, rule_id=RULE_ID, stream="Custom-SeForwarderEvents", columns={},
                           token=TOKEN) as endpoint:
        sink = logs_sink(endpoint, tls, ca_file=None)  # the test CA is not trusted

        [outcome] = sink.deliver(store(state_dir, events(1), sink="logs")).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.reason.startswith(f"TLS verification failed for https://127.0.0.1:{endpoint.port}")
    assert outcome.reason.endswith("give ca_file (the endpoint's CA bundle)")
    assert endpoint.uploads == []


def test_a_stored_event_that_is_not_a_cloudevent_is_dead_lettered_alone(identity, endpoint, tls,
                                                                        state_dir) -> None:
    stored = store(state_dir, [*events(1), agent_event("started"), agent_event("completed")], sink="logs")
    broken = type(stored[1])(**{**stored[1].__dict__, "payload": "not json"})

    outcomes = logs_sink(endpoint, tls).deliver([stored[0], broken, stored[2]]).outcomes

    assert outcomes[0] == Delivered() and outcomes[2] == Delivered()
    assert isinstance(outcomes[1], DeadLetter)
    assert outcomes[1].reason.startswith("stored event is not a valid CloudEvent")


def test_check_gets_a_token_and_reaches_the_endpoint(identity, endpoint, tls) -> None:
    assert logs_sink(endpoint, tls).check() is None
    assert len(token_requests(identity)) == 1


def test_check_names_an_unreachable_endpoint(identity, endpoint, tls) -> None:
    sink = logs_sink(endpoint, tls)
    endpoint.stop()

    problem = sink.check()

    assert problem is not None and problem.startswith(f"cannot reach https://127.0.0.1:{endpoint.port}: ")


def test_a_credential_that_cannot_be_built_is_a_retry_with_one_line(identity, endpoint, tls, state_dir,
                                                                  monkeypatch) -> None:
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", "/nonexistent/token")
    monkeypatch.setenv("AZURE_TENANT_ID", "00000000-0000-0000-0000-000000000000")
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.com")
    monkeypatch.delenv("AZURE_POD_IDENTITY_AUTHORITY_HOST")  # workload identity without a client id

    [outcome] = logs_sink(endpoint, tls).deliver(store(state_dir, events(1), sink="logs")).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.reason.startswith("cannot create the Logs ingestion client: ValueError: ")
    assert endpoint.uploads == []
